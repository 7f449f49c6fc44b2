"""Where a page draws its elements, read again until a reading holds.

A live page swaps its parts every 2 s (htmx): an element that Playwright finds and then
measures can be one a swap took out meanwhile, and its box is then None (``bounding_box``, seen
on a loaded machine) or empty. Read once, a layout check of a live page is a race; here every
match is read at once, and read again until the boxes hold, within a deadline.
"""

from __future__ import annotations

from playwright.sync_api import Locator

from tests.polling import wait_for

BOXES = """(elements) => elements.map((element) => {
  const box = element.getBoundingClientRect();
  return {x: box.x, y: box.y, width: box.width, height: box.height};
})"""
SETTLE_S = 30.0
"""How long a page may take to draw a part it swapped in."""


def drawn_boxes(locator: Locator) -> list[dict[str, float]]:
    """The box on screen of each element ``locator`` matches now (empty for one just taken
    out of the page)."""
    return list(locator.evaluate_all(BOXES))


def within_width(
    locator: Locator, width: float, settle_s: float = SETTLE_S
) -> list[dict[str, float]]:
    """Wait until ``locator`` matches elements and each is drawn (a box of some size) between
    the left edge and ``width``, for at most ``settle_s``; their boxes."""

    def fits() -> list[dict[str, float]] | None:
        boxes = drawn_boxes(locator)
        inside = all(
            b["width"] > 0
            and b["height"] > 0
            and b["x"] >= 0
            and b["x"] + b["width"] <= width + 0.5
            for b in boxes
        )
        return boxes if boxes and inside else None

    return wait_for(
        fits,
        settle_s,
        f"{locator} drawn within {width} px",
        details=lambda: str(drawn_boxes(locator)),
    )
