# The harness base image: what a run's pods need (simrun-worker, simrun-merge, simrun-exec) and
# the example task types, without the service. The image of a run with packages is built
# FROM it (runs/images.py), so its environment stays writable by the pods' user: the harness
# installs a run's source snapshots into it at the start of a pod.
# Build from the repository root:  docker build -f docker/harness.Dockerfile -t simrun-harness:0.1.0 .
FROM python:3.11.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/simrun \
    PATH=/opt/simrun/bin:$PATH

RUN groupadd --gid 1000 simrun \
    && useradd --uid 1000 --gid 1000 --create-home --shell /usr/sbin/nologin simrun \
    && python -m venv /opt/simrun \
    && mkdir -p /scratch \
    && chown -R simrun:simrun /opt/simrun /scratch

COPY --chown=1000:1000 pyproject.toml README.md /src/
COPY --chown=1000:1000 harness /src/harness

USER 1000:1000
RUN pip install --no-cache-dir /src

WORKDIR /scratch
CMD ["simrun-worker"]
