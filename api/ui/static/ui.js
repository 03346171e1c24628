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
    // the header's link to Search (it carries the user, and the /ui prefix under engram serve)
    var link = document.querySelector('header nav a[href*="/search"]');
    var user = new URLSearchParams(window.location.search).get("user");
    window.location.href = link ? link.href : "/search" + (user ? "?user=" + encodeURIComponent(user) : "");
  }
});
