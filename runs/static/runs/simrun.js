// The few behaviours htmx does not cover: filling the spec from an example, keeping a
// followed log scrolled to its end, and ticking the durations of running attempts.

document.addEventListener("click", (event) => {
  const button = event.target.closest("[data-example]");
  if (!button) return;
  const example = document.getElementById(button.dataset.example);
  const spec = document.getElementById("spec");
  if (example && spec) {
    spec.value = example.content.textContent;
    spec.focus();
  }
});

function keepLogAtEnd() {
  const follow = document.getElementById("follow");
  const text = document.querySelector("#log .log-text");
  if (text && (!follow || follow.checked)) text.scrollTop = text.scrollHeight;
}

document.addEventListener("DOMContentLoaded", keepLogAtEnd);
document.addEventListener("htmx:afterSwap", keepLogAtEnd);

// A running attempt's duration counts on between two polls of its page: from the server's
// figure at render time (data-ticking, seconds), by this browser's clock since, so the two
// clocks need not agree. Formatted as the server's "duration" filter.
function formatDuration(seconds) {
  const total = Math.max(0, Math.floor(seconds));
  const days = Math.floor(total / 86400);
  const hours = Math.floor((total % 86400) / 3600);
  const minutes = Math.floor((total % 3600) / 60);
  const secs = total % 60;
  const two = (n) => String(n).padStart(2, "0");
  if (days) return `${days}d ${hours}h`;
  if (hours) return `${hours}h ${two(minutes)}m`;
  if (minutes) return `${minutes}m ${two(secs)}s`;
  return `${secs}s`;
}

function markTicking() {
  const now = performance.now();
  for (const cell of document.querySelectorAll("[data-ticking]:not([data-shown-at])")) {
    cell.dataset.shownAt = String(now);
  }
}

function tick() {
  const now = performance.now();
  for (const cell of document.querySelectorAll("[data-ticking][data-shown-at]")) {
    const since = (now - Number(cell.dataset.shownAt)) / 1000;
    cell.textContent = formatDuration(Number(cell.dataset.ticking) + since);
  }
}

document.addEventListener("DOMContentLoaded", markTicking);
document.addEventListener("htmx:afterSwap", markTicking);
setInterval(tick, 1000);
