"""A layout check of a page that swaps its parts holds however often they are swapped
(``tests/browser/layout.py``): a two-step read (Playwright's ``bounding_box``) of the page
below found no box in 300 reads of 300."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page

from tests.browser.layout import within_width

pytestmark = pytest.mark.slow

SWAPPING = """
<table><tbody id="rows"><tr><td class="cell">a run</td></tr></tbody></table>
<script>
  // As htmx's outerHTML swap does every 2 s, but as often as the page can.
  setInterval(() => {
    document.getElementById("rows").outerHTML =
      '<tbody id="rows"><tr><td class="cell">a run</td></tr></tbody>';
  }, 0);
</script>
"""


def test_a_part_swapped_as_often_as_the_page_can_is_found_within_the_width(page: Page):
    page.set_content(SWAPPING)
    for _ in range(20):
        [box] = within_width(page.locator("#rows .cell"), 1366)
        assert box["x"] > 0 and box["width"] > 0


def test_a_part_drawn_past_the_width_is_named_with_its_box(page: Page):
    page.set_content('<p style="margin-left: 1500px"><span id="far">far</span></p>')
    with pytest.raises(AssertionError, match="drawn within 1366 px") as failed:
        within_width(page.locator("#far"), 1366, settle_s=1)
    assert "'x': 15" in str(failed.value)
