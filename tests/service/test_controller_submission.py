"""Submitting a run: image, node, workflow; failures, a cancel meanwhile, and recovery."""
# ruff: noqa: F811  (the fixtures are imported from controller_support by name)

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.db import OperationalError
from django.utils import timezone

from runs.backends import cluster_config
from runs.control import (
    backoff,
    cancelling,
    locks,
    reconciling,
    recovery,
    settling,
    submitting,
    waking,
)
from runs.models import Run, RunState
from runs.planning import images
from runs.planning.records import run_record
from tests.service.controller_support import (  # noqa: F401
    SWEEP,
    fake,
    fresh,
    home,
    launch,
    poll,
    sent,
    states,
)

pytestmark = pytest.mark.django_db

WITH_PACKAGES = {**SWEEP, "environment": {"packages": ["scipy>=1.11", "numpy"]}}


# The image


def test_an_environment_with_packages_is_built_once_into_an_image_named_by_its_content(
    launch, fake, store
):
    fake.runs_images = True
    run = launch(WITH_PACKAGES)
    expected = images.resolve(WITH_PACKAGES["environment"], cluster_config())
    assert run.image == expected.image and run.state == RunState.RUNNING
    assert fake.called("build_image") == [[str(store / "images" / expected.digest), run.image]]
    assert fake.submission(run.workflow).record.image == run.image
    dockerfile = (store / "images" / expected.digest / "Dockerfile").read_text()
    assert f"FROM {cluster_config().harness_image}" in dockerfile
    requirements = (store / "images" / expected.digest / "requirements.txt").read_text()
    assert requirements.splitlines() == ["numpy", "scipy>=1.11"]
    again = launch({**SWEEP, "environment": {"packages": ["numpy", "scipy>=1.11"]}})
    assert again.image == run.image
    assert len(fake.called("build_image")) == 1, "an image the registry has is not built again"


def test_an_environment_without_packages_runs_in_its_base_image_without_a_build(launch, fake):
    fake.runs_images = True
    plain = launch(SWEEP)
    assert plain.image == cluster_config().harness_image
    custom = launch({**SWEEP, "environment": {"image": "ghcr.io/lab/sim:2"}})
    assert custom.image == "ghcr.io/lab/sim:2"
    assert fake.called("build_image") == [] and fake.called("has_image") == []


def test_a_backend_that_runs_no_images_keeps_the_image_of_the_record(launch, fake):
    run = launch(WITH_PACKAGES)
    assert run.image == "" and fake.called("build_image") == []


def test_a_failed_build_fails_the_run_naming_the_image_and_submits_nothing(launch, fake):
    fake.runs_images = True
    fake.fail_next("build_image", message="kaniko exited 1")
    run = launch(WITH_PACKAGES)
    assert run.state == RunState.FAILED
    assert run.message.startswith("building the image simrun-env:")
    assert run.message.endswith("failed: kaniko exited 1")
    assert fake.called("submit") == []
    assert fake.called("cancel") == [[f"simrun-{run.id}"]], "one a process before may have made"
    assert states(run) == {"sweep": "skipped"}


# The node


def test_a_run_that_asks_for_a_node_reserves_the_smallest_free_one_that_fits(launch, fake):
    fake.add_node("node-small", cores=4)
    fake.add_node("node-large", cores=16)
    fake.add_node("node-down", cores=64, ready=False)
    fake.add_node("node-held", cores=32)
    fake.reserve("node-held", "otherrun01")
    run = launch({**SWEEP, "reserve_node": True})
    assert run.reserved_node == "node-small" and fake.reserved_by("node-small") == run.id
    assert fake.submission(run.workflow).record.reserved_node == "node-small"
    assert launch(SWEEP).reserved_node == "", "only a run that asks reserves a node"


def test_a_run_that_asks_for_a_node_when_none_is_free_fails(launch, fake):
    run = launch({**SWEEP, "reserve_node": True})
    assert run.state == RunState.FAILED
    assert run.message.startswith("no node is free to reserve for the run")


# Submitting


def test_the_submission_wakes_the_loop_after_the_workflow_is_created(launch, fake, sent):
    order = []
    fake.on_call = lambda method: order.append(method)
    launch()
    assert order == ["submit"] and sent["runs.tasks.reconcile"] == [()]
    launch()
    assert sent["runs.tasks.reconcile"] == [()], "a wake-up pending is not sent twice"
    locks.lower_flag(waking.WAKE_FLAG)
    waking.wake()
    assert sent["runs.tasks.reconcile"] == [(), ()]


def test_the_backend_gets_the_submission_time_and_owner_of_a_run_from_its_record(launch, fake):
    run = launch()
    record = fake.submission(run.workflow).record
    assert record.created_at == run.created_at.timestamp() and record.owner == run.owner_id


def test_a_run_the_backend_refuses_fails_with_its_message_and_nothing_to_cancel(launch, fake):
    fake.fail_next("submit", "ValueError", "task plot has no image")
    run = launch()
    assert run.state == RunState.FAILED and run.message == "task plot has no image"
    assert run.workflow == "" and not run.pending_cancel
    assert fake.called("cancel") == []


def test_a_submission_that_failed_otherwise_cancels_a_workflow_that_may_exist(launch, fake):
    fake.add_node("node-a")
    fake.fail_next("submit", "RuntimeError", "connection reset")
    run = launch({**SWEEP, "reserve_node": True})
    assert run.state == RunState.FAILED
    assert run.message == "submission failed: connection reset"
    assert fake.called("cancel") == [[f"simrun-{run.id}"]], "unknown counts as cancelled"
    assert fake.reserved_by("node-a") is None
    assert not run.pending_cancel and not run.pending_release and not run.live


def test_a_run_cancelled_while_its_workflow_is_created_ends_with_no_live_workflow(
    launch, fake, sent
):
    fake.add_node("node-a")
    run = launch({**SWEEP, "reserve_node": True}, submit=False)

    def cancel_meanwhile(method: str) -> None:
        if method == "submit":
            cancelling.request_cancel(fresh(run))

    fake.on_call = cancel_meanwhile
    assert submitting.submit(run.id, backend=fake)
    run = fresh(run)
    assert run.state == RunState.CANCELLED and run.workflow == f"simrun-{run.id}"
    assert fake.called("cancel") == [[run.workflow]]
    assert fake.reserved_by("node-a") is None
    assert not run.pending_cancel and not run.pending_release
    assert sent["runs.tasks.reconcile"] == [], "nothing to wake for"


def test_a_run_cancelled_while_its_image_builds_is_never_submitted(launch, fake):
    fake.runs_images = True
    run = launch(WITH_PACKAGES, submit=False)
    fake.on_call = lambda m: m == "build_image" and cancelling.request_cancel(fresh(run))
    assert submitting.submit(run.id, backend=fake)
    assert fresh(run).state == RunState.CANCELLED and fake.called("submit") == []
    assert fake.called("cancel") == [[f"simrun-{run.id}"]], "one a process before may have made"
    assert not fresh(run).pending_cancel


def test_a_run_no_longer_submitting_is_not_submitted_again(launch, fake):
    run = launch()
    assert submitting.submit(run.id, backend=fake)
    assert fake.called("submit") == [[run.id]]


def test_one_process_at_a_time_submits_a_run(launch, fake):
    run = launch(submit=False)
    with locks.hold(f"submit-{run.id}") as held:
        assert held
        assert submitting.submit(run.id, backend=fake) is False
    assert fresh(run).state == RunState.SUBMITTING and fake.called("submit") == []
    assert submitting.submit(run.id, backend=fake)
    assert fresh(run).state == RunState.RUNNING


# Recovery


def test_a_run_left_submitting_resumes_keeping_its_image_node_and_workflow(launch, fake):
    """A submission killed after it built, reserved and created: nothing is done twice."""
    fake.runs_images = True
    fake.add_node("node-a", cores=8)
    run = launch({**WITH_PACKAGES, "reserve_node": True}, submit=False)
    image = images.resolve(WITH_PACKAGES["environment"], cluster_config()).image
    fake.add_image(image)
    Run.objects.filter(pk=run.pk).update(image=image, reserved_node="node-a")
    fake.reserve("node-a", run.id)
    fake.add_node("node-b", cores=64)
    workflow = fake.submit(run_record(fresh(run), list(run.tasks.all())), {}, {}, None)
    fake.set_nodes(workflow, {"sweep-w0": "Running"})
    assert recovery.recover(backend=fake) == [run.id]
    run = fresh(run)
    assert run.state == RunState.RUNNING and run.workflow == workflow
    assert run.image == image and run.reserved_node == "node-a"
    assert fake.called("build_image") == [] and fake.reserved_by("node-b") is None
    assert fake.workflow(workflow).tasks == {"sweep-w0": "Running"}
    poll(fake)
    assert states(run) == {"sweep": "running"}


def test_recover_fails_a_running_record_without_a_workflow_name(launch, fake):
    run = launch(submit=False)
    Run.objects.filter(pk=run.pk).update(state=RunState.RUNNING)
    recovery.recover(backend=fake)
    run = fresh(run)
    assert run.state == RunState.FAILED and "no workflow name" in run.message
    assert not run.pending_cancel and not run.live


def test_recover_retries_the_pending_work_of_terminal_runs(launch, fake):
    fake.add_node("node-a")
    run = launch({**SWEEP, "reserve_node": True})
    fake.fail_next("cancel")
    cancelling.request_cancel(fresh(run))
    settling.settle(run.id, backend=fake)
    assert fresh(run).pending_cancel and not fresh(run).pending_release
    recovery.recover(backend=fake)
    assert not fresh(run).live and fake.called("cancel") == [[run.workflow]] * 2


def test_recover_leaves_a_submission_running_elsewhere_to_it(launch, fake, sent):
    run = launch(submit=False)
    with locks.hold(f"submit-{run.id}"):
        assert recovery.recover(backend=fake) == []
    assert sent["runs.tasks.submit_run"] == [], "the loop hands it on should the other stop"
    assert fresh(run).state == RunState.SUBMITTING


def test_recover_goes_on_after_a_run_whose_recovery_raises(launch, fake, monkeypatch):
    first, second = launch(submit=False), launch(submit=False)
    ended = launch()
    fake.fail_next("cancel")
    cancelling.request_cancel(fresh(ended))
    settling.settle(ended.id, backend=fake)
    assert fresh(ended).pending_cancel
    real = submitting._submit

    def broken_first(run: Run, backend) -> None:
        if run.pk == first.pk:
            raise RuntimeError("a record that cannot be read")
        real(run, backend)

    monkeypatch.setattr(submitting, "_submit", broken_first)
    assert recovery.recover(backend=fake) == [second.id]
    assert fresh(first).state == RunState.SUBMITTING, "left to the loop"
    assert fresh(second).state == RunState.RUNNING
    assert not fresh(ended).pending_cancel, "settle_pending ran all the same"


# A submission that stopped or failed after the backend accepted it


def past_grace(settings) -> time_machine.travel:
    """A moment after a new run's first submission should have started."""
    later = timezone.now() + timedelta(seconds=2 * settings.SIMRUN_POLL_S + 1)
    return time_machine.travel(later, tick=False)


def test_a_record_write_failing_after_the_backend_accepted_is_resumed_by_the_loop(
    launch, fake, monkeypatch, settings
):
    run = launch(submit=False)
    real = submitting._write_submitting

    def database_down(run: Run, **changes) -> bool:
        if changes.get("state") == RunState.RUNNING:
            raise OperationalError("server closed the connection unexpectedly")
        return real(run, **changes)

    monkeypatch.setattr(submitting, "_write_submitting", database_down)
    with pytest.raises(OperationalError):
        submitting.submit(run.id, backend=fake)
    monkeypatch.setattr(submitting, "_write_submitting", real)
    assert fresh(run).state == RunState.SUBMITTING and fake.called("submit") == [[run.id]]
    handed: list[str] = []
    assert reconciling.reconcile_pass(backend=fake, schedule=handed.append) == 0
    assert handed == [], "a new run is left to its first submission"
    with past_grace(settings):
        reconciling.reconcile_pass(backend=fake, schedule=handed.append)
        reconciling.reconcile_pass(backend=fake, schedule=handed.append)
    assert handed == [run.id], "handed on once, then pushed aside for a short while"
    assert submitting.submit(handed[0], backend=fake)
    run = fresh(run)
    assert run.state == RunState.RUNNING and run.workflow == f"simrun-{run.id}"
    assert fake.called("cancel") == []


def test_a_resumed_submission_failing_before_the_workflow_cancels_the_one_made_before(
    launch, fake, monkeypatch
):
    run = launch(submit=False)
    made = fake.submit(run_record(fresh(run), list(run.tasks.all())), {}, {}, None)

    def broken() -> None:
        raise RuntimeError("SIMRUN_CLUSTER names no namespace")

    monkeypatch.setattr(submitting, "cluster_config", broken)
    assert submitting.submit(run.id, backend=fake)
    run = fresh(run)
    assert run.state == RunState.FAILED
    assert run.message == "submission failed: SIMRUN_CLUSTER names no namespace"
    assert run.workflow == made, "the name is kept, not overwritten with ''"
    assert fake.called("cancel") == [[made]] and not run.pending_cancel


def test_a_resumed_submission_the_backend_refuses_cancels_the_workflow_made_before(launch, fake):
    run = launch(submit=False)
    made = fake.submit(run_record(fresh(run), list(run.tasks.all())), {}, {}, None)
    fake.fail_next("submit", "ValueError", "task big needs 64 GiB, the largest node has 32")

    assert submitting.submit(run.id, backend=fake)

    run = fresh(run)
    assert run.state == RunState.FAILED
    assert run.message == "task big needs 64 GiB, the largest node has 32"
    assert run.workflow == made
    assert fake.called("cancel") == [[made]] and not run.pending_cancel


def test_a_submission_the_backend_is_unavailable_for_is_tried_again_soon_not_failed(
    launch, fake, settings
):
    run = launch(submit=False)
    fake.fail_next("submit", "BackendUnavailable", "the Kubernetes API did not answer")
    assert submitting.submit(run.id, backend=fake)
    assert fresh(run).state == RunState.SUBMITTING and fake.called("cancel") == []
    Run.objects.filter(pk=run.pk).update(reconcile_failures=6)
    handed: list[str] = []
    with past_grace(settings):
        reconciling.reconcile_pass(backend=fake, schedule=handed.append)
        wait = fresh(run).reconcile_after - timezone.now()
    assert handed == [run.id]
    assert timedelta(0) < wait <= timedelta(seconds=backoff.UNAVAILABLE_MAX_S)
    submitting.submit(run.id, backend=fake)
    assert fresh(run).state == RunState.RUNNING


def test_a_hand_on_the_broker_refuses_is_tried_again_as_soon_as_for_an_unavailable_backend(
    launch, fake, settings
):
    run = launch(submit=False)
    Run.objects.filter(pk=run.pk).update(reconcile_failures=6)

    def broker_down(run_id: str) -> None:
        raise ConnectionError("broker down")

    with past_grace(settings):
        reconciling.reconcile_pass(backend=fake, schedule=broker_down)
        wait = fresh(run).reconcile_after - timezone.now()
    assert wait <= timedelta(seconds=backoff.UNAVAILABLE_MAX_S)
    assert fresh(run).state == RunState.SUBMITTING and fresh(run).reconcile_failures == 7


def test_a_submission_running_elsewhere_is_not_handed_on(launch, fake, settings):
    run = launch(submit=False)
    handed: list[str] = []
    with locks.hold(f"submit-{run.id}"), past_grace(settings):
        reconciling.reconcile_pass(backend=fake, schedule=handed.append)
    assert handed == [] and fresh(run).state == RunState.SUBMITTING


def test_a_submission_that_never_completes_fails_and_its_workflow_is_cancelled(
    launch, fake, settings
):
    run = launch(submit=False)
    made = fake.submit(run_record(fresh(run), list(run.tasks.all())), {}, {}, None)
    Run.objects.filter(pk=run.pk).update(reconcile_failures=submitting.SUBMISSION_TRIES)
    handed: list[str] = []
    with past_grace(settings):
        reconciling.reconcile_pass(backend=fake, schedule=handed.append)
    run = fresh(run)
    assert handed == [] and run.state == RunState.FAILED
    tries = submitting.SUBMISSION_TRIES
    assert run.message == f"the submission did not complete after {tries} tries"
    assert run.workflow == made and fake.called("cancel") == [[made]]
    assert not run.live
