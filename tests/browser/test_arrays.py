"""A researcher submits a small sweep from the form's array / sweep section, lands on the array's page (its
tasks counted by state, the failed first), opens a task and follows its link back to the array.

Screenshots go to ``test-artifacts/browser/`` (``QM_SHOTS`` names another folder).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from clusters.models import Cluster
from demo.jobs import H100
from scheduler.models import Job, JobArray
from tests.browser.conftest import sign_in_as
from tests.browser.test_jobs import governed, shot  # noqa: F401 - the governed fleet fixture

pytestmark = pytest.mark.browser


def test_researcher_submits_a_sweep_and_reads_the_array(page: Page, governed: dict[str, Cluster], demo: Any) -> None:  # noqa: F811
    sign_in_as(page, "alice")
    page.goto("/jobs/new/")
    form = page.get_by_test_id("job-form")
    form.get_by_label("Name").fill("lr-sweep")
    form.get_by_label(H100).check()
    form.get_by_label("Accelerators per worker").fill("1")
    form.get_by_label("Container image").fill("ghcr.io/lab/train:1")
    form.get_by_label("Command").fill("python train.py")
    section = page.get_by_test_id("array-section")
    section.get_by_label("or a sweep over parameters").fill("lr = 0.1, 0.01, 0.001\nseed = 1, 2")
    section.get_by_label("At most running at once").fill("2")
    shot(page, "array-form")
    page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(re.compile(r"/jobs/arrays/\d+/$"))
    array = JobArray.objects.get()
    assert (array.count, array.max_running) == (6, 2)
    counts = page.get_by_test_id("array-counts")
    # The submission woke the placement loop: two tasks placed, as the limit allows, the rest waiting.
    expect(counts).to_contain_text("Placing: 2")
    expect(counts).to_contain_text("Pending: 4")
    expect(counts).to_contain_text("0 of 6 done")
    expect(page.get_by_test_id("array-tasks").locator("tbody tr")).to_have_count(6)

    failed = Job.objects.get(array=array, array_index=4)
    Job.objects.filter(pk=failed.pk).update(state=Job.State.FAILED, message="Exit code 2 (the program's own).")
    page.reload()
    expect(counts).to_contain_text("Failed: 1")
    first = page.get_by_test_id("array-tasks").locator("tbody tr").first
    expect(first).to_contain_text("lr=0.001")
    expect(first).to_contain_text("Exit code 2")
    expect(page.get_by_test_id("array-requeue-form")).to_be_visible()
    shot(page, "array-page")

    first.get_by_role("link", name=f"#{failed.pk}").click()
    expect(page).to_have_url(re.compile(rf"/jobs/{failed.pk}/$"))
    shot(page, "array-task-page")
    page.get_by_test_id("pipeline").get_by_test_id("array-link").click()
    expect(page).to_have_url(re.compile(rf"/jobs/arrays/{array.pk}/$"))
    page.get_by_test_id("array-requeue-form").get_by_role("button").click()
    expect(counts).to_contain_text("Requeued: 1")
