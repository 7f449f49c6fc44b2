"""The runs API for every persona: anonymous, owner, another user, staff."""

from __future__ import annotations

import json

import pytest
import time_machine
from django.utils import timezone
from rest_framework import serializers
from rest_framework.test import APIClient

from runs import tasks
from runs.api.serializers import RunSerializer
from runs.common.tokens import create_token
from runs.models import Attempt, Run, RunState, Task
from runs.reads.access import listed_rows, visible_runs, with_progress
from runs.reads.listing import Listing
from tests.factories import running, submitted

pytestmark = pytest.mark.django_db

SWEEP_YAML = """
name: demo
tasks:
  sweep: {type: squares, settings: {n: 20}, workers: 2}
  summary: {type: csv-stats, inputs: {table: sweep}}
"""
SWEEP_JSON = json.dumps(
    {"name": "demo", "tasks": {"sweep": {"type": "squares", "settings": {"n": 20}}}}
)


def submit(client: APIClient, body: str = SWEEP_YAML, content_type="application/yaml"):
    return client.post("/api/runs/", data=body, content_type=content_type)


def run_of(user, name="demo") -> Run:
    return Run.objects.create(owner=user, name=name, spec={"tasks": {}}, backend="fake")


# Submission


def test_an_owner_submits_yaml_and_gets_the_run_with_its_planned_tasks(
    owner_client, owner, store, queued, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = submit(owner_client)
    assert response.status_code == 201
    body = response.json()
    assert body["state"] == "submitting" and body["owner"] == "alice" and body["name"] == "demo"
    assert [t["id"] for t in body["tasks"]] == ["sweep", "summary"]
    sweep = body["tasks"][0]
    assert sweep["kind"] == "split" and sweep["units_total"] == 20
    assert sweep["plan"]["workers"] == 2 and sweep["plan"]["why"]
    assert body["tasks"][1]["inputs"] == {"table": "sweep"}
    assert queued == [body["id"]]


def test_a_submission_writes_run_json_and_each_task_json_into_the_store(owner_client, store):
    run_id = submit(owner_client).json()["id"]
    run_json = json.loads((store / "runs" / run_id / "run.json").read_text())
    assert run_json["id"] == run_id and set(run_json["tasks"]) == {"sweep", "summary"}
    task_json = json.loads((store / "runs" / run_id / "tasks/sweep/task.json").read_text())
    assert task_json["type"] == "squares"
    assert task_json["settings"]["n"] == 20 and task_json["settings"]["delay_s"] == 0.0
    assert {"base_gb", "per_worker_gb", "processes", "coordinator_merges"} <= set(task_json["plan"])
    summary = json.loads((store / "runs" / run_id / "tasks/summary/task.json").read_text())
    assert summary["inputs"] == {"table": "sweep"}


def test_the_run_is_handed_to_submission_only_after_commit(owner_client, queued):
    response = submit(owner_client)
    assert response.status_code == 201
    # The test transaction never commits, so nothing may have been handed over.
    assert queued == []


def test_a_broker_that_refuses_the_hand_on_still_gives_the_committed_run_a_201(
    owner_client, monkeypatch, caplog, django_capture_on_commit_callbacks
):
    """The run is written before the broker is asked; the loop hands it on later."""

    def refuse(run_id: str) -> None:
        raise OSError("broker locked")

    monkeypatch.setattr(tasks.submit_run, "delay", refuse)
    with django_capture_on_commit_callbacks(execute=True):
        response = submit(owner_client)
    assert response.status_code == 201
    run = Run.objects.get(pk=response.json()["id"])
    assert run.state == RunState.SUBMITTING
    assert f"the submission of run {run.id} waits" in caplog.text


def test_json_submissions_work_as_well(owner_client):
    response = submit(owner_client, SWEEP_JSON, "application/json")
    assert response.status_code == 201
    settings = response.json()["tasks"][0]["settings"]
    assert settings["n"] == 20 and settings["delay_s"] == 0.0


def test_a_bad_spec_is_a_400_with_the_field_errors_and_creates_nothing(owner_client, store):
    response = submit(owner_client, "tasks: {sweep: {type: squares, settings: {n: 0}}}")
    assert response.status_code == 400
    assert "tasks.sweep.settings.n" in response.json()
    assert not Run.objects.exists() and not (store / "runs").exists()


def test_a_task_id_whose_pod_label_would_be_invalid_is_a_400_naming_the_rule(owner_client):
    response = submit(owner_client, "tasks: {sweep-: {type: squares, settings: {n: 5}}}")

    assert response.status_code == 400
    [message] = response.json()["tasks.sweep-"]
    assert "ends with a letter or digit" in message and "simrun/task" in message
    assert not Run.objects.exists()


def test_a_memory_size_too_small_to_mean_anything_is_a_400_naming_the_field(owner_client):
    body = '{"tasks": {"s": {"type": "squares", "settings": {"n": 1}, "memory": {"gb": 1e-300}}}}'
    response = submit(owner_client, body, "application/json")
    assert response.status_code == 400
    assert response.json() == {"tasks.s.memory.gb": ["must be at least 0.001 (GiB)"]}
    assert not Run.objects.exists()


def test_a_task_asking_more_than_this_machine_has_is_a_400_with_the_numbers(
    owner_client, backend, monkeypatch, store
):
    monkeypatch.setattr(backend, "largest_node", "this machine")
    backend.max_cores, backend.max_memory_gb = 2, 23.54
    body = "tasks: {big: {command: [sleep, '1'], cores: 8, memory: {gb: 100}}}"
    response = submit(owner_client, body)
    assert response.status_code == 400
    assert response.json() == {
        "tasks.big.cores": ["task big asks 8 cores but this machine has 2"],
        "tasks.big.memory.gb": ["task big asks 100 GiB of memory but this machine has 23.5 GiB"],
    }
    assert not Run.objects.exists() and not (store / "runs").exists()


def test_on_a_cluster_the_refusal_names_the_largest_node_and_one_process_too_large(
    owner_client, backend
):
    backend.max_cores, backend.max_memory_gb = 16, 64.0
    body = "tasks: {sweep: {type: squares, settings: {n: 4}, memory: {per_worker_gb: 80}}}"
    response = submit(owner_client, body)
    assert response.status_code == 400
    [message] = response.json()["tasks.sweep.memory.per_worker_gb"]
    assert message.endswith("GiB for its base and one process but the largest node has 64.0 GiB")


def test_what_the_planner_chose_itself_is_still_capped_at_the_machine(owner_client, backend):
    backend.max_cores, backend.max_memory_gb = 1, 23.5
    response = submit(owner_client, "tasks: {sweep: {type: squares, settings: {n: 4}}}")
    assert response.status_code == 201
    assert response.json()["tasks"][0]["plan"]["cores"] == 1


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        ("", "application/json"),
        ("{not json", "application/json"),
        ("\xff", "text/plain"),
        ("[1, 2]", "application/yaml"),
    ],
)
def test_garbage_bodies_are_400_never_500(owner_client, body, content_type):
    response = submit(owner_client, body, content_type)
    assert response.status_code == 400
    assert "spec" in response.json()


def test_an_unsupported_media_type_is_415(owner_client):
    response = owner_client.post("/api/runs/", data=b"x", content_type="image/png")
    assert response.status_code == 415


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (SWEEP_YAML, "application/x-www-form-urlencoded"),  # curl --data-binary @run.yaml
        (SWEEP_JSON, "application/x-www-form-urlencoded"),
        (SWEEP_YAML, ""),
        (SWEEP_JSON, "application/octet-stream"),
    ],
    ids=["yaml-as-form", "json-as-form", "yaml-no-type", "json-as-octets"],
)
def test_a_spec_is_taken_whatever_its_content_type_says_when_it_reads_as_one(
    owner_client, body, content_type
):
    # generic: the client would make a form of an empty type; "" is a request without one
    response = owner_client.generic("POST", "/api/runs/", body.encode(), content_type)
    assert response.status_code == 201, response.content
    assert response.json()["tasks"][0]["id"] == "sweep"


def test_a_body_that_reads_as_no_spec_under_another_type_is_a_415_naming_the_types(
    owner_client,
):
    response = submit(owner_client, "tasks: [unclosed", "application/x-www-form-urlencoded")
    assert response.status_code == 415
    detail = response.json()["detail"]
    assert "application/x-www-form-urlencoded" in detail and "application/yaml" in detail
    assert "not valid YAML or JSON" in detail and not Run.objects.exists()


def test_a_body_that_is_no_yaml_is_a_400_naming_the_spec_and_its_line(owner_client):
    response = submit(owner_client, "tasks:\n  sweep: {type: [squares\n", "application/yaml")
    assert response.status_code == 400
    [message] = response.json()["spec"]
    assert 'in "the spec", line 2' in message and "<unicode string>" not in message


def test_a_bad_spec_under_another_type_is_still_a_400_with_its_fields(owner_client):
    body = "tasks: {sweep: {type: squares, settings: {n: 0}}}"
    response = submit(owner_client, body, "application/x-www-form-urlencoded")
    assert response.status_code == 400 and "tasks.sweep.settings.n" in response.json()


def test_a_yaml_syntax_error_keeps_its_lines_so_the_caret_points_at_the_column(owner_client):
    response = submit(owner_client, "name: broken\ntasks:\n  a: {type: squares\n  b: 3\n")
    assert response.status_code == 400
    [message] = response.json()["spec"]
    assert message.splitlines()[-2:] == ["      b: 3", "       ^"]


def test_an_unknown_snapshot_is_a_400_on_its_index(owner_client):
    body = SWEEP_YAML + "sources: [" + "b" * 64 + "]\n"
    response = submit(owner_client, body)
    assert response.status_code == 400
    assert "unknown snapshot" in response.json()["sources.0"][0]


def test_anonymous_cannot_submit(anonymous_client):
    assert submit(anonymous_client).status_code == 401
    assert not Run.objects.exists()


# Reading


def test_anonymous_gets_401_everywhere(anonymous_client, owner):
    run = run_of(owner)
    assert anonymous_client.get("/api/runs/").status_code == 401
    assert anonymous_client.get(f"/api/runs/{run.id}/").status_code == 401
    assert anonymous_client.post(f"/api/runs/{run.id}/cancel/").status_code == 401


def test_a_user_lists_their_own_runs_newest_first(owner_client, owner, stranger):
    older = run_of(owner, "older")
    newer = run_of(owner, "newer")
    run_of(stranger, "theirs")
    Run.objects.filter(pk=older.pk).update(created_at=timezone.now() - timezone.timedelta(hours=1))
    body = owner_client.get("/api/runs/").json()
    assert [r["id"] for r in body["results"]] == [newer.id, older.id]
    assert body["count"] == 2


def test_the_runs_list_is_paginated(owner_client, owner):
    for i in range(55):
        run_of(owner, f"run-{i}")
    first = owner_client.get("/api/runs/").json()
    assert first["count"] == 55 and len(first["results"]) == 50 and first["next"]
    second = owner_client.get(first["next"]).json()
    assert len(second["results"]) == 5 and second["next"] is None


@pytest.mark.parametrize("runs", [1, 200])
def test_the_runs_list_takes_a_constant_number_of_queries(
    owner_client, owner, runs, django_assert_max_num_queries
):
    Run.objects.bulk_create(
        Run(owner=owner, name=f"run-{i}", spec={"tasks": {}}, backend="fake") for i in range(runs)
    )
    with django_assert_max_num_queries(2):
        body = owner_client.get("/api/runs/?page_size=200").json()
    assert len(body["results"]) == runs


@pytest.mark.parametrize("runs", [1, 200])
def test_the_runs_list_with_tasks_sums_their_units_in_the_same_queries(
    owner_client, owner, runs, django_assert_max_num_queries
):
    made = Run.objects.bulk_create(
        Run(owner=owner, name=f"run-{i}", spec={"tasks": {}}, backend="fake") for i in range(runs)
    )
    Task.objects.bulk_create(
        Task(run=r, task_id=t, kind="command", plan={}, units_done=1, units_total=3, position=p)
        for r in made
        for p, t in enumerate(["a", "b"])
    )
    with django_assert_max_num_queries(2):
        body = owner_client.get("/api/runs/?page_size=200").json()
    assert {(r["units_done"], r["units_total"]) for r in body["results"]} == {(2, 6)}


def test_a_list_longer_than_its_page_takes_its_page_and_a_capped_count(
    staff_client, owner, django_assert_max_num_queries
):
    Run.objects.bulk_create(
        Run(owner=owner, name=f"run-{i}", spec={"tasks": {}}, backend="fake") for i in range(60)
    )
    with django_assert_max_num_queries(2):
        body = staff_client.get("/api/runs/?owner=alice&name=RUN-&page_size=10").json()
    assert len(body["results"]) == 10 and body["count"] == 60 and body["next"]
    assert body["results"][0]["owner"] == "alice"


def test_counting_stops_at_the_cap_and_says_so(owner_client, owner, monkeypatch):
    monkeypatch.setattr("runs.reads.capped_pages.COUNT_CAP", 10)
    monkeypatch.setattr("runs.reads.listed_json.COUNT_CAP", 10)  # the list's page on PostgreSQL
    for i in range(12):
        run_of(owner, f"run-{i}")
    body = owner_client.get("/api/runs/?page_size=5").json()
    assert body["count"] == 10 and body["count_exact"] is False and body["next"]
    last = owner_client.get("/api/runs/?page_size=5&page=3").json()
    assert len(last["results"]) == 2 and last["next"] is None


@pytest.mark.parametrize("query", ["page=0", "page=x", "page=99"])
def test_a_page_that_does_not_exist_is_404(owner_client, owner, query):
    run_of(owner)
    assert owner_client.get(f"/api/runs/?{query}").status_code == 404


@pytest.mark.parametrize("size", ["0", "201", "-1", "x"])
def test_a_bad_page_size_is_400(owner_client, size):
    response = owner_client.get(f"/api/runs/?page_size={size}")
    assert response.status_code == 400 and "page_size" in response.json()


# Filters


def test_runs_filter_by_state_one_or_several(owner_client, owner):
    first, second, third = run_of(owner, "a"), run_of(owner, "b"), run_of(owner, "c")
    Run.objects.filter(pk=first.pk).update(state=RunState.RUNNING)
    Run.objects.filter(pk=second.pk).update(state=RunState.FAILED, ended_at=timezone.now())

    def ids(query):
        return {r["id"] for r in owner_client.get(f"/api/runs/?{query}").json()["results"]}

    assert ids("state=running") == {first.id}
    assert ids("state=running&state=failed") == {first.id, second.id}
    assert ids("state=submitting") == {third.id}


def test_runs_filter_by_part_of_the_name_in_any_case(owner_client, owner):
    wanted = run_of(owner, "Ising-Sweep-7")
    run_of(owner, "squares")
    body = owner_client.get("/api/runs/?name=sweep").json()
    assert [r["id"] for r in body["results"]] == [wanted.id]


def test_runs_filter_by_creation_date_or_time(owner_client, owner):
    old, new = run_of(owner, "old"), run_of(owner, "new")
    Run.objects.filter(pk=old.pk).update(created_at="2024-01-01T12:00:00Z")

    def ids(query):
        return [r["id"] for r in owner_client.get(f"/api/runs/?{query}").json()["results"]]

    assert ids("created_before=2024-01-02") == [old.id]
    assert ids("created_after=2024-01-01T13:00:00Z") == [new.id]
    assert ids("created_after=2023-12-31&created_before=2024-01-01T12:00:01Z") == [old.id]


def test_runs_filter_live_or_ended(owner_client, owner):
    live, done = run_of(owner, "live"), run_of(owner, "done")
    Run.objects.filter(pk=done.pk).update(state=RunState.SUCCEEDED, ended_at=timezone.now())
    assert [r["id"] for r in owner_client.get("/api/runs/?live=true").json()["results"]] == [
        live.id
    ]
    assert [r["id"] for r in owner_client.get("/api/runs/?live=false").json()["results"]] == [
        done.id
    ]
    listed = owner_client.get("/api/runs/").json()["results"]
    assert {r["id"]: r["live"] for r in listed} == {live.id: True, done.id: False}


def test_staff_filter_by_owner_and_a_user_cannot_see_others_through_it(
    staff_client, owner_client, owner, stranger
):
    mine, theirs = run_of(owner), run_of(stranger)
    body = staff_client.get("/api/runs/?owner=mallory").json()
    assert [r["id"] for r in body["results"]] == [theirs.id]
    assert owner_client.get("/api/runs/?owner=mallory").json()["results"] == []
    assert [r["id"] for r in owner_client.get("/api/runs/?owner=alice").json()["results"]] == [
        mine.id
    ]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("state=exploded", "state"),
        ("created_after=yesterday", "created_after"),
        ("created_before=2024-13-45", "created_before"),
        ("live=maybe", "live"),
        ("name=a%00b", "name"),
    ],
)
def test_a_bad_filter_is_400_naming_the_parameter(owner_client, query, field):
    response = owner_client.get(f"/api/runs/?{query}")
    assert response.status_code == 400
    assert field in response.json()


def test_an_owner_sees_the_detail_with_tasks_and_plans(owner_client):
    run_id = submit(owner_client).json()["id"]
    body = owner_client.get(f"/api/runs/{run_id}/").json()
    assert body["id"] == run_id and body["spec"]["name"] == "demo"
    assert body["tasks"][0]["plan"]["memory_gb"] > 0
    assert body["tasks"][0]["plan"]["why"]


def test_the_detail_shows_queued_while_the_run_runs_and_none_of_its_tasks_started(
    owner_client, owner
):
    run = running(submitted(owner), sweep="queued")  # summary waits for sweep
    body = owner_client.get(f"/api/runs/{run.id}/").json()
    assert (body["state"], body["shown_state"]) == ("running", "queued")
    Task.objects.filter(run=run, task_id="sweep").update(state="running")
    assert owner_client.get(f"/api/runs/{run.id}/").json()["shown_state"] == "running"


def test_another_users_run_is_404_for_detail_and_cancel(stranger_client, owner):
    run = run_of(owner)
    assert stranger_client.get(f"/api/runs/{run.id}/").status_code == 404
    assert stranger_client.post(f"/api/runs/{run.id}/cancel/").status_code == 404
    assert Run.objects.get(pk=run.pk).state == RunState.SUBMITTING


def test_an_unknown_run_is_404(owner_client):
    assert owner_client.get("/api/runs/nosuchrun/").status_code == 404


def test_staff_see_and_act_on_every_run(staff_client, owner, stranger):
    mine, theirs = run_of(owner), run_of(stranger)
    listed = {r["id"] for r in staff_client.get("/api/runs/").json()["results"]}
    assert listed == {mine.id, theirs.id}
    assert staff_client.get(f"/api/runs/{theirs.id}/").status_code == 200
    assert staff_client.post(f"/api/runs/{theirs.id}/cancel/").status_code == 202


# Cancel


def test_an_owner_cancels_a_live_run_which_is_written_cancelled_at_once(owner_client, owner):
    run = run_of(owner)
    Run.objects.filter(pk=run.pk).update(state=RunState.RUNNING, workflow="simrun-x")
    response = owner_client.post(f"/api/runs/{run.id}/cancel/")
    assert response.status_code == 202
    assert response.json()["state"] == "cancelled"
    stored = Run.objects.get(pk=run.pk)
    assert stored.state == RunState.CANCELLED and stored.ended_at is not None
    assert stored.pending_cancel


def test_cancelling_an_ended_run_is_a_conflict(owner_client, owner):
    run = run_of(owner)
    Run.objects.filter(pk=run.pk).update(state=RunState.SUCCEEDED, ended_at=timezone.now())
    response = owner_client.post(f"/api/runs/{run.id}/cancel/")
    assert response.status_code == 409
    assert Run.objects.get(pk=run.pk).state == RunState.SUCCEEDED


# Authentication


@pytest.mark.parametrize("scheme", ["Token", "Bearer", "bearer"])
def test_a_token_authenticates_under_either_scheme(owner, scheme):
    _, token = create_token(owner)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"{scheme} {token}")
    assert client.get("/api/runs/").status_code == 200
    client.credentials(HTTP_AUTHORIZATION=f"{scheme} wrong")
    assert client.get("/api/runs/").status_code == 401


def test_a_browser_session_authenticates(client, owner):
    assert client.login(username="alice", password="alice-password")
    assert client.get("/api/runs/").status_code == 200


def test_a_session_needs_the_csrf_token_to_submit(owner):
    client = APIClient(enforce_csrf_checks=True)
    client.login(username="alice", password="alice-password")
    response = client.post("/api/runs/", data=SWEEP_YAML, content_type="application/yaml")
    assert response.status_code == 403
    assert not Task.objects.exists()


# A run's detail: tasks, plans, attempts, progress


def test_the_detail_has_attempts_with_exit_codes_oom_evidence_and_nodes(owner_client, owner):
    run_id = submit(owner_client).json()["id"]
    sweep = Task.objects.get(run_id=run_id, task_id="sweep")
    Attempt.objects.create(
        task=sweep,
        worker="sweep-w0",
        attempt=0,
        phase="Failed",
        exit_code=137,
        oom_killed=True,
        oom_evidence="OOMKilled",
        node_name="node-a",
        memory_gb=1.5,
    )
    Attempt.objects.create(task=sweep, worker="sweep-w1", attempt=0, evicted=True, node_name="b")
    attempts = owner_client.get(f"/api/runs/{run_id}/").json()["tasks"][0]["attempts"]
    assert attempts[0] == {
        **attempts[0],
        "worker": "sweep-w0",
        "exit_code": 137,
        "oom_killed": True,
        "oom_evidence": "OOMKilled",
        "node_name": "node-a",
        "memory_gb": 1.5,
    }
    assert attempts[1]["evicted"] is True and attempts[1]["node_name"] == "b"


def test_a_running_task_shows_the_units_written_since_the_last_poll(owner_client, store):
    run_id = submit(owner_client).json()["id"]
    lines = [json.dumps({"unit": i, "worker": "sweep-w0", "seconds": 0.1}) + "\n" for i in range(7)]
    counted = len("".join(lines[:2]).encode())
    Task.objects.filter(run_id=run_id, task_id="sweep").update(
        state="running", units_done=2, progress_bytes=counted
    )
    progress = store / "runs" / run_id / "tasks" / "sweep" / "progress.jsonl"
    # Two lines were counted at the last poll; five whole lines and one being written follow.
    progress.write_text("".join(lines) + '{"unit": 7, "wor')
    body = owner_client.get(f"/api/runs/{run_id}/").json()
    assert body["tasks"][0]["units_done"] == 7
    assert body["units_done"] == 7 and body["units_total"] == 21


@pytest.mark.parametrize("tasks_per_run", [1, 40])
def test_the_detail_takes_a_constant_number_of_queries(
    owner_client, owner, tasks_per_run, django_assert_max_num_queries
):
    run = run_of(owner)
    made = Task.objects.bulk_create(
        Task(
            run=run,
            task_id=f"t{i}",
            kind="command",
            plan={"cores": 1, "memory_gb": 1},
            position=i,
            units_total=1,
        )
        for i in range(tasks_per_run)
    )
    Attempt.objects.bulk_create(
        Attempt(task=t, worker=t.task_id, attempt=a) for t in made for a in range(2)
    )
    with django_assert_max_num_queries(5):  # the run, its tasks, their attempts, re-runs, usage
        body = owner_client.get(f"/api/runs/{run.id}/").json()
    assert len(body["tasks"]) == tasks_per_run
    assert all(len(t["attempts"]) == 2 for t in body["tasks"])


def test_the_fast_list_representation_is_the_one_drf_would_build(owner, stranger):
    submitted_at = timezone.now() - timezone.timedelta(minutes=3)
    for state, ended_at in [(RunState.RUNNING, None), (RunState.FAILED, timezone.now())]:
        run = run_of(owner, f"run-{state}")
        Run.objects.filter(pk=run.pk).update(
            state=state, submitted_at=submitted_at, ended_at=ended_at, message="why"
        )
    runs = with_progress(visible_runs(owner))
    with time_machine.travel(timezone.now(), tick=False):
        for row in listed_rows(Listing.of(owner, {}).runs()):
            fast = RunSerializer().to_representation(row)
            run = runs.get(pk=row.id)
            generic = serializers.ModelSerializer.to_representation(RunSerializer(run), run)
            assert fast == dict(generic)


def test_the_schema_and_its_documentation_page_are_served(anonymous_client):
    schema = anonymous_client.get("/api/schema/?format=json")
    assert schema.status_code == 200
    body = schema.json()
    assert body["openapi"].startswith("3.") and "/api/runs/" in body["paths"]
    submission = body["paths"]["/api/runs/"]["post"]["requestBody"]["content"]
    assert {"application/json", "application/yaml"} <= set(submission)
    assert anonymous_client.get("/api/docs/").status_code == 200


def test_a_submission_past_the_users_queued_runs_is_a_429_naming_the_bound(
    owner_client, stranger_client, owner, settings
):
    settings.SIMRUN_USER_QUEUED_RUNS = 2
    spec = {"tasks": {"t": {"command": ["true"]}}}
    first, second = (owner_client.post("/api/runs/", spec, format="json") for _ in range(2))

    third = owner_client.post("/api/runs/", spec, format="json")

    assert (first.status_code, second.status_code, third.status_code) == (201, 201, 429)
    assert (
        "SIMRUN_USER_QUEUED_RUNS" in third.json()["detail"] and "2 runs" in third.json()["detail"]
    )
    assert stranger_client.post("/api/runs/", spec, format="json").status_code == 201  # theirs
    Run.objects.filter(pk=first.json()["id"]).update(
        state=RunState.SUCCEEDED, ended_at=timezone.now()
    )
    assert owner_client.post("/api/runs/", spec, format="json").status_code == 201
