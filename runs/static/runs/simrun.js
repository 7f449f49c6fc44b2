// The few behaviours htmx does not cover: filling the spec from an example, and keeping a
// followed log scrolled to its end.

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
