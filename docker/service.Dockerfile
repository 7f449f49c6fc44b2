# The simrun service: the web server, the Celery worker and beat run from this one image.
# Build from the repository root:  docker build -f docker/service.Dockerfile -t simrun:0.1.0 .
FROM python:3.11.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/simrun/bin:$PATH \
    DJANGO_SETTINGS_MODULE=simrun_site.settings \
    SIMRUN_HOME=/var/lib/simrun

RUN groupadd --gid 1000 simrun \
    && useradd --uid 1000 --gid 1000 --no-create-home --home-dir /var/lib/simrun \
        --shell /usr/sbin/nologin simrun \
    && mkdir -p /var/lib/simrun /store \
    && chown simrun:simrun /var/lib/simrun /store

WORKDIR /app
# Only what the service needs; the templates are found beside the installed code.
COPY pyproject.toml README.md manage.py ./
COPY harness ./harness
COPY runs ./runs
COPY simrun_site ./simrun_site
COPY templates ./templates
RUN python -m venv /opt/simrun \
    && /opt/simrun/bin/pip install --no-cache-dir --editable "/app[service]"

USER 1000:1000
EXPOSE 8000
CMD ["gunicorn", "simrun_site.asgi:application", "-c", "python:simrun_site.gunicorn", "--worker-class", "simrun_site.front.Worker", "--bind", "0.0.0.0:8000", "--workers", "3", "--access-logfile", "-"]
