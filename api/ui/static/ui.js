// engram ui: "/" focuses the search box (on the search page), or opens the search page from any other.
document.addEventListener("keydown", function (event) {
  if (event.key !== "/" || event.ctrlKey || event.metaKey || event.altKey) return;
  var target = event.target;
  var tag = target && target.tagName;
  if (tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || (target && target.isContentEditable)) return;
  event.preventDefault();
  var box = document.getElementById("q");
  if (box) {
    box.focus();
    box.select();
  } else {
    var user = new URLSearchParams(window.location.search).get("user");
    window.location.href = "/search" + (user ? "?user=" + encodeURIComponent(user) : "");
  }
});
