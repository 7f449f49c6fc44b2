"""The backend protocol: what the service needs of a cluster, and the data it exchanges.

The service, not the backend, decides the state of a run (``runs.control.states``, Ruling 17b): a
backend reports the phases of the DAG nodes of a workflow and the attempts of its pods that failed.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from harness.tasktypes import TaskType
from runs.common.store import TaskFolder

PREEMPTED_PHASE = "Preempted"
"""A node whose pod was evicted or preempted and whose retry waits."""
RETRYING_PHASE = "Retrying"
"""A node whose pod failed otherwise and whose retry waits."""

EXTRA_NODE = re.compile(r"^(?P<task>[a-z][a-z0-9-]*)-extra\(\d+:(?P<worker>\d+)\)$")
"""The node of an extra worker in a fan-out: ``<task>-extra(<i>:<n>)`` is worker ``<task>-w<n>``."""


def worker_of_node(dag_node: str) -> str:
    """The key of a DAG node's attempts in ``BackendStatus.failed``: the worker id of an extra
    worker (``T-extra(<i>:<n>)`` → ``T-w<n>``), the node's own name otherwise."""
    if match := EXTRA_NODE.match(dag_node):
        return f"{match['task']}-w{match['worker']}"
    return dag_node


RETRY_LIMIT = 10
"""Retries of a pod after its first attempt (Argo's ``retryStrategy.limit``): one after a kill
for memory, the others for evictions; the local backend retries as the cluster does."""

FINAL_PHASES = frozenset({"Succeeded", "Failed", "Error", "Skipped", "Omitted"})


class TaskPlan(BaseModel):
    """The resources of one task, decided at submission and stored with it.

    The contract between planning and the backends: the planner makes it, a backend reads it,
    so it lives with the protocol and no backend imports the planner.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    cores: int = Field(ge=1)
    memory_gb: float = Field(gt=0, description="per pod")
    workers: int = Field(default=1, ge=1, description="pods of a split task, coordinator included")
    base_gb: float = Field(ge=0)
    per_worker_gb: float = Field(gt=0)
    processes: int = Field(default=1, ge=1, description="pool processes per pod")
    retry_memory_gb: float = Field(gt=0, description="per pod, after a kill for memory")
    coordinator_merges: bool = False
    why: str = ""
    why_short: str = Field(default="", description="the reason in one plain sentence")
    counterfactual_gb: dict[str, float] = Field(
        default_factory=dict,
        description="per pod: what these sizing policies would have given it from the same "
        "observations, whatever the spec said",
    )
    features: dict[str, float] = Field(
        default_factory=dict,
        description="what was known of the task when it was planned (its numeric settings, "
        "units, cores): its observations keep them, so later plans read the evidence of "
        "tasks like it",
    )


class BackendUnavailable(Exception):
    """The cluster did not answer, or answered that it cannot now (a connection refused, a
    timeout, 429, 5xx): the call may succeed later, so the controller tries it again soon
    instead of failing the run or pushing it aside for long. Backends raise it (or a subclass)
    with a one-sentence message."""


def workflow_name(run_id: str) -> str:
    """The name of the workflow of a run in every backend, ``simrun-<run id>``.

    The controller cancels it by this name when a submission failed after the backend may
    have created it (its ``submit`` raised before returning the name).
    """
    return f"simrun-{run_id}"


class FailedAttempt(BaseModel):
    """An attempt of a pod which failed."""

    attempt: int = Field(ge=0, description="SIMRUN_ATTEMPT of the pod, Argo's {{retries}}")
    exit_code: int | None = None
    oom_killed: bool = Field(
        default=False, description="The reason OOMKilled; an exit 137 alone is no evidence."
    )
    evicted: bool = Field(default=False, description="Evicted or preempted, not failed itself.")
    node: str | None = Field(default=None, description="The server the pod ran on.")
    message: str = ""
    ended_at: float | None = Field(
        default=None, description="When it ended (Unix time), when the backend knows."
    )
    started_at: float | None = Field(
        default=None, description="When its pod started (Unix time), when the backend knows."
    )
    memory_gb: float | None = Field(
        default=None, description="The memory limit it ran with, when the backend knows it."
    )
    reason: str = Field(
        default="",
        description="Why it was ended from outside, when the backend knows: a pod's "
        "DisruptionTarget reason (PreemptionByScheduler, EvictionByEvictionAPI, "
        "DeletionByTaintManager, TerminationByKubelet), Kueue's preemption, the kubelet's.",
    )


class BackendStatus(BaseModel):
    """The state of a workflow in the backend."""

    phase: str
    tasks: dict[str, str] = Field(
        default_factory=dict,
        description="Phase of every DAG node by name: <task>-w0, <task>-extra(<i>:<item>), "
        "<task>-merge, <task>; a node not yet created is missing.",
    )
    failed: dict[str, list[FailedAttempt]] = Field(
        default_factory=dict,
        description="Failed attempts per worker id, per unsplit task id, per <task>-merge.",
    )
    hosts: dict[str, str] = Field(
        default_factory=dict, description="The server of the latest pod of a DAG node."
    )
    started: dict[str, float] = Field(
        default_factory=dict,
        description="When the latest pod of a DAG node started (Unix time), by node.",
    )
    message: str = ""
    waiting: dict[str, str] = Field(
        default_factory=dict,
        description="Why a DAG node ready to start waits (cores, memory, the queue's head; "
        "the scheduler's or Kueue's reason on a cluster), by node.",
    )


class PodLog(BaseModel):
    """The log of the main container of one pod (one attempt) of a task."""

    node: str
    pod: str
    text: str
    done: bool
    attempt: int | None = None
    missing: str = Field(
        default="", description="Why the log of a terminated pod cannot be read any more."
    )
    unread: str = Field(
        default="",
        description="Why the log of a terminated pod could not be read now: asked again later.",
    )


class Placement(BaseModel):
    """A pod of a run which has not terminated, with its node and requests."""

    workflow: str
    dag_task: str
    pod: str
    node: str | None
    phase: str
    cores: float
    memory_gb: float
    worker: str | None = None
    attempt: int | None = None


class KeptLogs(BaseModel):
    """What ``Backend.keep_logs`` did for one task: whether its logs are all in the store."""

    complete: bool = Field(
        description="Every attempt of the task ended and its whole log is in the store."
    )
    unread: bool = Field(
        default=False, description="A read of an ended attempt's log failed now: ask again."
    )


class NodeInfo(BaseModel):
    """A node of the cluster (a machine) with what it offers and who holds it."""

    name: str
    cores: float
    memory_gb: float
    ready: bool = True
    reserved_by: str | None = Field(default=None, description="The run holding it, if any.")
    labels: dict[str, str] = Field(default_factory=dict)
    reservable: bool = Field(
        default=True,
        description="A run may reserve it: an operator marked it for simrun, it is no "
        "control-plane node and has no taint the runs' pods do not tolerate.",
    )


class ClusterConfig(BaseModel):
    """Where and how the runs' pods go on the cluster (from settings.SIMRUN_CLUSTER)."""

    model_config = ConfigDict(frozen=True)

    namespace: str = "simrun"
    queue: str = "simrun"
    service_account: str = "simrun-runner"
    store_claim: str = "simrun-store"
    store_mount: str = "/store"
    registry: str = ""
    pull_secret: str = ""
    harness_image: str = "ghcr.io/simrun/harness:0.1.0"
    node_selector: dict[str, str] = Field(default_factory=dict)
    ttl_s: int = 3600
    kubeconfig: str = ""
    registry_auth_file: str = Field(
        default="", description="A Docker config.json with the registry's credentials."
    )
    builder_image: str = Field(
        default="ghcr.io/osscontainertools/kaniko:v1.27.4",
        description="The image that builds images in the cluster: the maintained fork of "
        "Kaniko (Google archived its project in June 2025), same flags.",
    )
    build_namespace: str = Field(
        default="simrun-build",
        description="Where image builds run (as root, which the runs' restricted namespace "
        "refuses); empty: the runs' namespace.",
    )
    build_timeout_s: int = 3600
    argo_controller: str = Field(
        default="argo/workflow-controller",
        description="The namespace/name of Argo's controller Deployment, read for its version.",
    )
    argo_version: str = Field(
        default="", description="Argo's version (3.7) when its Deployment cannot be read."
    )
    argo_instance_id: str = Field(
        default="",
        max_length=63,
        pattern=r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$",
        description="The instanceID of Argo's controller (a label value): the runs' Workflows "
        "are labelled with it, as only they are what such a controller runs; empty: a "
        "controller without one, which runs only Workflows without the label.",
    )
    pod_start_timeout_s: int = Field(
        default=600,
        ge=1,
        description="How long a scheduled pod may fail to start (an image it cannot pull, a "
        "Secret it cannot find, no node that fits) before its task fails with the reason.",
    )
    scratch_gb: int = Field(
        default=10,
        ge=1,
        description="The size of a pod's scratch directory (GiB): its emptyDir's sizeLimit and "
        "the ephemeral storage the pod requests.",
    )


class TaskRecord(BaseModel):
    """A task of a run as a backend needs it."""

    model_config = ConfigDict(frozen=True)

    id: str
    kind: str = Field(description="split, plugin or command")
    type: str = ""
    settings: dict[str, Any] = Field(default_factory=dict)
    inputs: dict[str, str] = Field(default_factory=dict, description="port -> task id")
    command: list[str] = Field(default_factory=list)
    image: str = ""


class RunRecord(BaseModel):
    """A run as a backend sees it: the database record, without the ORM."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str = ""
    image: str = ""
    reserved_node: str = ""
    local_commands: str = ""
    sources: list[str] = Field(default_factory=list, description="snapshot digests")
    packages: list[str] = Field(
        default_factory=list, description="environment.packages: what its image must contain"
    )
    tasks: dict[str, TaskRecord]
    store: Path = Field(description="The root of the store.")
    created_at: float | None = Field(
        default=None, description="When the run was submitted (Unix time): runs queue by it."
    )
    owner: int | None = Field(default=None, description="The id of the user who submitted it.")
    login: str = Field(
        default="",
        description="The Unix login mapped to its owner (``simrun user NAME --login``): a "
        "service run as root for a team submits its cluster jobs as it; empty: none.",
    )
    reused: list[str] = Field(
        default_factory=list,
        description="Tasks done before the run starts, from the outputs of an earlier task "
        "with their key (docs/resume.md): not run; their out/ is read as any task's.",
    )

    @property
    def run_dir(self) -> Path:
        return self.store / "runs" / self.id

    def task_dir(self, task_id: str) -> Path:
        return self.run_dir / "tasks" / task_id


@runtime_checkable
class Backend(Protocol):
    """What the service needs of a cluster."""

    name: str
    runs_images: bool
    """Whether runs are containers: the service resolves and builds the environment's image."""
    extra_workers: bool
    """Whether a split task may run as several pods; False: one pod that also merges."""
    reserves_nodes: bool
    """Whether a run may reserve a node (``reserve_node``); refused at submission otherwise."""
    no_reservations: str
    """Why a run may not reserve a node, the refusal of ``reserve_node`` (where
    ``reserves_nodes`` is False); empty where it may."""
    enforces_memory: bool
    """Whether a pod's memory limit is enforced (a kill for memory is real)."""
    max_cores: int | None
    """The cores of the largest node, None when unknown: the planner caps a task's cores."""
    max_memory_gb: float | None
    """The memory of the largest node in GiB, None when unknown."""
    largest_node: str
    """How a refusal names the largest place a task can run: "this machine", "the largest node"."""
    logs_in_store: bool
    """Whether every attempt's log is written into its task's ``logs/`` folder as it runs, so
    the service copies nothing and reads the store alone (True), or is read from the cluster
    and kept by ``keep_logs`` (False)."""

    @classmethod
    def from_settings(cls) -> Backend:
        """The backend configured by the Django settings."""
        ...

    def submit(
        self,
        record: RunRecord,
        plans: dict[str, TaskPlan],
        types: dict[str, TaskType],
        cluster: ClusterConfig,
    ) -> str:
        """Submit a run and return the name of its workflow; ValueError when it cannot be."""
        ...

    def refusal(
        self,
        record: RunRecord,
        plans: dict[str, TaskPlan],
        types: dict[str, TaskType],
        cluster: ClusterConfig,
    ) -> str | None:
        """Why ``submit`` would refuse this run whatever the cluster's state (more than its
        workflow engine holds, say), naming the limit; None when it would not. Decided without
        a call to the cluster, so a submission is refused at once, never sent."""
        ...

    def subscribe(self, callback: Callable[[], None]) -> None:
        """Register a callback the backend calls when the status of a run changed."""
        ...

    def status(self, name: str) -> BackendStatus:
        """The status of a workflow; KeyError when it does not exist (any more)."""
        ...

    def cancel(self, name: str) -> None:
        """Terminate a workflow and its pods."""
        ...

    def stop(self, name: str) -> None:
        """Stop a workflow whose run is decided: pods still pending are removed."""
        ...

    def logs(self, name: str, task_id: str, tail_lines: int | None = None) -> list[PodLog]:
        """The logs of the pods of a task (each attempt still there), oldest first."""
        ...

    def keep_logs(self, name: str, task_id: str, folder: TaskFolder) -> KeptLogs:
        """Keep in the task's folder the logs of its attempts that ended and are not kept yet,
        one at a time and bounded; never read the log of an attempt that still runs.
        KeyError when the workflow does not exist (any more)."""
        ...

    def describe(self) -> list[str]:
        """What ``simrun serve``'s banner says of this backend beyond its name (what it
        offers, who the tasks run as): one sentence a line, or none."""
        ...

    def isolation_problem(self, owner: int | None = 0, kind: str = "split") -> str | None:
        """Why the tasks of ``owner``'s runs cannot run apart from the service and from other
        users' tasks here, None if they can. ``kind``: split, plugin or command (a command
        needs less: no interpreter of the service's)."""
        ...

    def nodes(self) -> list[NodeInfo]:
        """The nodes of the cluster."""
        ...

    def choose_node(self, plans: Mapping[str, TaskPlan], *, taken: Iterable[str] = ()) -> str:
        """The node a run that asked to reserve one gets: free, reservable, fitting its
        largest task. ``taken``: nodes another run got first. LookupError saying why when
        none does (and always where ``reserves_nodes`` is False)."""
        ...

    def placements(self) -> list[Placement]:
        """The pods of the runs which have not terminated, with nodes and requests."""
        ...

    def reserve(self, node: str, run_id: str) -> None:
        """Taint ``simrun/reserved=<run>:NoSchedule`` and label ``simrun/reserved=<run>``."""
        ...

    def unreserve(self, node: str, run_id: str) -> None:
        """Remove the reservation of this run only; KeyError for an unknown node."""
        ...

    def build_image(self, context: Path, ref: str) -> None:
        """Build the image of a build context and push it as ref."""
        ...

    def has_image(self, ref: str) -> bool:
        """Whether the registry has the image ref."""
        ...


@runtime_checkable
class TaskFolders(Protocol):
    """A backend whose tasks run as users of their own (the local backend, as root): a folder
    the service makes where a task will write is handed to that user first."""

    def hand_over(self, dir_fd: int, owner: int | None) -> None:
        """Give the folder (a descriptor) to the task user of the runs of ``owner``."""
        ...


@runtime_checkable
class Renders(Protocol):
    """A backend whose submission can be shown without a cluster or a database (``simrun
    render-workflow``): what it would create for a run, as data."""

    @classmethod
    def render(
        cls,
        record: RunRecord,
        plans: Mapping[str, TaskPlan],
        types: Mapping[str, TaskType],
        cluster: ClusterConfig,
    ) -> dict[str, Any]:
        """What ``submit`` would create; ValueError when a task cannot run there."""
        ...


@runtime_checkable
class Stepped(Protocol):
    """A backend that needs a process of its own beside the service (the local backend's
    step, which starts and ends the runs' processes); ``simrun serve`` starts it."""

    def run_steps(self, stop: threading.Event) -> None:
        """Step until ``stop`` is set."""
        ...


@runtime_checkable
class ChangeSignal(Protocol):
    """A backend that says cheaply which workflows changed, so the control loop polls only
    those (``runs.control.poll_memory``): without it, every live run is polled each pass."""

    def versions(self, names: list[str]) -> dict[str, str]:
        """The version of each named workflow the backend knows without asking per workflow
        (a resourceVersion, a digest of its status): a workflow whose status changed gets
        another version. A name left out is unknown (not seen yet, gone): it is polled. One
        call for all names, answered from what the backend holds, never a request per name."""
        ...
