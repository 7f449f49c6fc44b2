"""``Client.submit(..., resume=RUN)`` and ``Run.resume()``: a resume from a notebook."""

from __future__ import annotations

import pytest

from runs.client import InvalidRequest
from runs.models import Run, RunState
from tests.factories import ended, submitted

pytestmark = pytest.mark.django_db(transaction=True)

EDITED = {"name": "edited", "tasks": {"sweep": {"type": "squares", "settings": {"n": 7}}}}


def test_submit_with_resume_and_run_resume_submit_resumes_of_an_ended_run(client, owner):
    source = ended(submitted(owner), RunState.CANCELLED)

    edited = client.submit(EDITED, resume=source.id)
    again = client.run(source.id).resume()

    assert edited.data["resume_of"] == again.data["resume_of"] == source.id
    assert Run.objects.get(pk=edited.id).spec["tasks"]["sweep"]["settings"] == {"n": 7}
    assert Run.objects.get(pk=again.id).spec == source.spec
    with pytest.raises(InvalidRequest) as refused:
        client.run(again.id).resume()
    assert "has not ended" in refused.value.fields["resume_of"][0]
