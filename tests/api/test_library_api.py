"""Observations, task types, source snapshots and the account through the API."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import tarfile

import pytest
from knox.models import AuthToken
from rest_framework.test import APIClient

from runs.models import Observation, Snapshot
from runs.planning import snapshots
from tests import floods
from tests.factories import SWEEP_YAML, submitted

pytestmark = pytest.mark.django_db


def observe(run, *, task_type="squares", peak_gb=0.2, processes=2, oom=False, count=1):
    Observation.objects.bulk_create(
        Observation(
            task_type=task_type,
            run=run,
            task=run.tasks.first(),
            worker=f"{task_type}-w{i}",
            attempt=0,
            processes=processes,
            per_worker_gb=0.1,
            peak_bytes=int(peak_gb * processes * 2**30),
            oom=oom,
        )
        for i in range(count)
    )


# Observations


def test_a_user_sees_the_observations_of_their_runs_and_staff_all(
    owner_client, staff_client, owner, stranger
):
    mine, theirs = submitted(owner), submitted(stranger)
    observe(mine, count=2)
    observe(theirs, count=3)
    body = owner_client.get("/api/observations/").json()
    assert body["count"] == 2 and {o["run"] for o in body["results"]} == {mine.id}
    assert body["results"][0]["peak_gb_per_process"] == pytest.approx(0.2)
    assert staff_client.get("/api/observations/").json()["count"] == 5


def test_observations_filter_by_task_type(owner_client, owner):
    run = submitted(owner)
    observe(run, task_type="squares")
    observe(run, task_type="alloc", count=2)
    body = owner_client.get("/api/observations/?task_type=alloc").json()
    assert body["count"] == 2 and {o["task_type"] for o in body["results"]} == {"alloc"}


@pytest.mark.parametrize("count", [1, 200])
def test_the_observations_list_takes_a_constant_number_of_queries(
    owner_client, owner, count, django_assert_max_num_queries
):
    observe(submitted(owner), count=count)
    with django_assert_max_num_queries(2):
        body = owner_client.get("/api/observations/?page_size=200").json()
    assert len(body["results"]) == count


def test_task_types_show_the_memory_a_new_task_is_planned_with(owner_client, owner):
    before = {t["name"]: t for t in owner_client.get("/api/task-types/").json()}
    assert before["squares"]["kind"] == "split" and before["csv-stats"]["kind"] == "plugin"
    assert before["squares"]["planned_per_worker_gb"] == before["squares"]["default_per_worker_gb"]
    assert "default of squares" in before["squares"]["why"]
    observe(submitted(owner), peak_gb=0.4, count=5)
    after = {t["name"]: t for t in owner_client.get("/api/task-types/").json()}
    assert after["squares"]["observations"] == 5
    # The sizing policy over five peaks of 0.4 GiB: above them, rounded up to the 0.05 step.
    assert 0.4 < after["squares"]["planned_per_worker_gb"] <= 0.5
    assert "5 observations of squares" in after["squares"]["why"]


def test_the_task_types_list_takes_two_queries_however_many_types(
    owner_client, owner, django_assert_max_num_queries
):
    run = submitted(owner)
    for name in ["squares", "alloc", "ising", "csv-stats"]:
        observe(run, task_type=name, count=3)
    with django_assert_max_num_queries(2):  # the latest observations, the prior's evidence
        assert owner_client.get("/api/task-types/").status_code == 200


# Snapshots


def archive(files: dict[str, bytes | None] | None = None, **links: str) -> bytes:
    """A tar.gz of files (None: a directory) and symlinks, the same bytes at every call (its
    gzip header holds no time): pytest names cases by them, alike in every xdist worker."""
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as packed,
        tarfile.open(fileobj=packed, mode="w") as tar,
    ):
        for name, data in (files or {"pyproject.toml": b"[project]\nname='x'\n"}).items():
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        for name, target in links.items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
    return buffer.getvalue()


def upload(client: APIClient, body: bytes, name: str = "mypkg"):
    return client.post(f"/api/snapshots/?name={name}", data=body, content_type="application/gzip")


def test_an_upload_is_kept_once_under_its_sha256(owner_client, stranger_client, store):
    body = archive({"pyproject.toml": b"[project]\n", "pkg/__init__.py": b"x = 1\n"})
    first = upload(owner_client, body)
    assert first.status_code == 201
    digest = first.json()["id"]
    assert digest == hashlib.sha256(body).hexdigest() and first.json()["name"] == "mypkg"
    tree = store / "snapshots" / digest
    assert (tree / "pkg" / "__init__.py").read_text() == "x = 1\n"
    again = upload(owner_client, body)
    assert again.status_code == 200 and again.json()["id"] == digest
    assert upload(stranger_client, body).status_code == 201
    assert Snapshot.objects.filter(digest=digest).count() == 2
    assert [p.name for p in (store / "snapshots").iterdir() if not p.name.startswith(".")] == [
        digest
    ]


def test_an_uploaded_tree_is_open_to_every_task_user_from_its_root(owner_client, store):
    body = archive({"pkg/__init__.py": b"x = 1\n"})
    digest = upload(owner_client, body).json()["id"]
    tree = store / "snapshots" / digest
    assert stat.S_IMODE(tree.stat().st_mode) == 0o755  # mkdtemp's 0700 shut every task out
    assert stat.S_IMODE((tree / "pkg" / "__init__.py").stat().st_mode) == 0o644


def test_a_spec_names_an_uploaded_snapshot_and_not_another_users(owner_client, stranger_client):
    digest = upload(owner_client, archive()).json()["id"]
    spec = SWEEP_YAML + f"sources: [{digest}]\n"
    mine = owner_client.post("/api/runs/", data=spec, content_type="application/yaml")
    assert mine.status_code == 201 and mine.json()["spec"]["sources"] == [digest]
    theirs = stranger_client.post("/api/runs/", data=spec, content_type="application/yaml")
    assert theirs.status_code == 400 and "sources.0" in theirs.json()


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (archive({"/etc/evil": b"x"}), "absolute"),
        (archive({"../evil": b"x"}), "'..'"),
        (archive({"a/../../evil": b"x"}), "'..'"),
        (archive(link="/etc/passwd"), "leads out"),
        (archive(link="../../outside"), "leads out"),
        (archive({"sub": None}, **{"sub/link": "../../x"}), "leads out"),
        (b"not gzip at all", "not a readable tar.gz"),
        (b"", "empty"),
    ],
)
def test_an_archive_that_could_escape_is_refused_and_nothing_is_kept(
    owner_client, store, body, reason
):
    response = upload(owner_client, body)
    assert response.status_code == 400 and reason in response.json()["archive"][0]
    assert not Snapshot.objects.exists()
    kept = [p for p in (store / "snapshots").glob("*") if not p.name.startswith(".")]
    leftovers = list((store / "snapshots").glob(".extract-*"))
    assert kept == [] and leftovers == []


def test_devices_and_fifos_are_refused(owner_client):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("fifo")
        info.type = tarfile.FIFOTYPE
        tar.addfile(info)
    response = upload(owner_client, buffer.getvalue())
    assert response.status_code == 400 and "only files" in response.json()["archive"][0]


def test_a_link_that_stays_inside_the_tree_is_kept(owner_client, store):
    body = archive({"pkg": None, "pkg/real.py": b"y = 2\n"}, **{"pkg/alias.py": "real.py"})
    digest = upload(owner_client, body).json()["id"]
    assert (store / "snapshots" / digest / "pkg" / "alias.py").read_text() == "y = 2\n"


def test_archives_past_the_caps_are_refused(owner_client, monkeypatch):
    monkeypatch.setattr(snapshots, "MAX_FILES", 3)
    many = archive({f"f{i}": b"x" for i in range(4)})
    assert "more than 3 entries" in upload(owner_client, many).json()["archive"][0]
    monkeypatch.setattr(snapshots, "MAX_TREE_BYTES", 1000)
    big = archive({"big": b"x" * 2000})
    assert "larger than" in upload(owner_client, big).json()["archive"][0]
    monkeypatch.setattr(snapshots, "MAX_ARCHIVE_BYTES", 100)
    assert "larger than" in upload(owner_client, b"x" * 101).json()["archive"][0]


def test_a_user_lists_and_reads_their_own_snapshots_only(owner_client, stranger_client):
    digest = upload(owner_client, archive()).json()["id"]
    assert [s["id"] for s in owner_client.get("/api/snapshots/").json()["results"]] == [digest]
    assert owner_client.get(f"/api/snapshots/{digest}/").json()["id"] == digest
    assert stranger_client.get("/api/snapshots/").json()["results"] == []
    assert stranger_client.get(f"/api/snapshots/{digest}/").status_code == 404


def test_observations_and_task_types_are_401_for_anonymous(anonymous_client):
    assert anonymous_client.get("/api/observations/").status_code == 401
    assert anonymous_client.get("/api/task-types/").status_code == 401


def test_snapshots_are_401_for_anonymous(anonymous_client):
    assert anonymous_client.get("/api/snapshots/").status_code == 401
    assert upload(anonymous_client, archive()).status_code == 401


# The account


def test_me_says_who_is_asking(owner_client, staff_client, anonymous_client):
    assert owner_client.get("/api/me/").json() == {"username": "alice", "is_staff": False}
    assert staff_client.get("/api/me/").json()["is_staff"] is True
    assert anonymous_client.get("/api/me/").status_code == 401


def test_a_token_comes_from_a_username_and_password(anonymous_client, owner):
    response = anonymous_client.post(
        "/api/token/", {"username": "alice", "password": "alice-password"}, format="json"
    )
    assert response.status_code == 200
    token = response.json()["token"]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert client.get("/api/me/").json()["username"] == "alice"
    assert token not in str(list(AuthToken.objects.values()))  # only its digest is kept
    wrong = anonymous_client.post(
        "/api/token/", {"username": "alice", "password": "nope"}, format="json"
    )
    assert wrong.status_code == 400


def test_an_unknown_api_path_is_a_json_404(owner_client):
    response = owner_client.get("/api/nothing/here/")
    assert response.status_code == 404 and "no such API path" in response.json()["detail"]


def zeros(mib: float, name: str = "bomb") -> bytes:
    """A gzip bomb: ``mib`` MiB of zeros, a few KiB packed (the name makes each one new)."""
    return archive({name: bytes(int(mib * 2**20))})


def test_a_gzip_bomb_past_the_users_budget_is_refused_and_nothing_is_kept(
    owner_client, store, settings
):
    settings.SIMRUN_SNAPSHOT_USER_BYTES = 2 << 20
    body = zeros(3)
    assert len(body) < 2**20 / 50  # a few KiB that extract to 3 MiB

    response = upload(owner_client, body)

    assert response.status_code == 400
    assert "SIMRUN_SNAPSHOT_USER_BYTES" in response.json()["archive"][0]
    assert "2 MiB" in response.json()["archive"][0]
    assert [p for p in (store / "snapshots").iterdir() if not p.name.startswith(".")] == []
    assert not list((store / "snapshots").glob(".extract-*"))
    assert not Snapshot.objects.exists()


def test_a_bomb_of_many_members_stops_at_the_budget_while_it_is_extracted(
    owner_client, store, settings
):
    """40 members of 1 MiB, each within the budget by its declared size: checked after the
    extraction (or member by member against its own size only), they fill the 8 MiB disk of the
    snapshots first and the upload is a 507 for a full disk, not a refusal naming the budget."""
    settings.SIMRUN_SNAPSHOT_USER_BYTES = 2 << 20
    body = archive({f"part{i}": bytes(2**20) for i in range(40)})
    with floods.tmpfs(store / "snapshots", size_mb=8):
        response = upload(owner_client, body)
        left = [p for p in (store / "snapshots").iterdir() if p.name != ".incoming"]
        free = os.statvfs(store / "snapshots")

    assert response.status_code == 400, response.content[:500]
    assert "SIMRUN_SNAPSHOT_USER_BYTES" in response.json()["archive"][0]
    assert left == [p for p in left if p.name == ".budget.lock"]
    assert free.f_bfree * free.f_frsize > 7 * 2**20  # nothing of it kept


def test_each_users_snapshots_are_bounded_and_so_are_everyones(
    owner_client, stranger_client, settings
):
    settings.SIMRUN_SNAPSHOT_USER_BYTES = 2 << 20
    settings.SIMRUN_SNAPSHOT_TOTAL_BYTES = 3 << 20
    first = upload(owner_client, zeros(1.5, "a"))
    assert first.status_code == 201
    assert Snapshot.objects.get().tree_bytes == int(1.5 * 2**20)  # its extracted bytes

    mine = upload(owner_client, zeros(1, "b"))  # 2.5 MiB of the owner's 2
    theirs = upload(stranger_client, zeros(1, "c"))  # 2.5 MiB of everyone's 3
    again = upload(stranger_client, zeros(1, "d"))  # 3.5 MiB of everyone's 3

    assert mine.status_code == 400
    assert "SIMRUN_SNAPSHOT_USER_BYTES" in mine.json()["archive"][0]
    assert theirs.status_code == 201, theirs.json()
    assert again.status_code == 400
    assert "SIMRUN_SNAPSHOT_TOTAL_BYTES" in again.json()["archive"][0]


def test_a_tree_kept_for_another_user_counts_against_the_new_owners_budget(
    owner_client, stranger_client, settings
):
    settings.SIMRUN_SNAPSHOT_USER_BYTES = 2 << 20
    body = zeros(1.5)
    assert upload(owner_client, body).status_code == 201
    assert upload(stranger_client, zeros(1, "theirs")).status_code == 201

    shared = upload(stranger_client, body)  # on disk already: not extracted again

    assert shared.status_code == 400
    assert "SIMRUN_SNAPSHOT_USER_BYTES" in shared.json()["archive"][0]
