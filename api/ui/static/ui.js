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

// an audio or video item's transcript follows its player: the word playing is marked (class "now"). Without this
// script the transcript is plain text and the player starts at the segment (a media fragment).
document.addEventListener("DOMContentLoaded", function () {
  var box = document.querySelector("[data-follow]");
  var player = box && document.getElementById(box.getAttribute("data-follow"));
  if (!player) return;
  var words = Array.prototype.slice.call(box.querySelectorAll("span[data-start]"));
  var times = words.map(function (w) { return [parseFloat(w.dataset.start), parseFloat(w.dataset.end)]; });
  var current = null;
  function follow() {
    var t = player.currentTime, found = null;
    for (var i = 0; i < words.length && times[i][0] <= t; i++) {
      if (t < times[i][1] + 0.3) found = words[i];
    }
    if (found === current) return;
    if (current) current.classList.remove("now");
    if (found) found.classList.add("now");
    current = found;
  }
  player.addEventListener("timeupdate", follow);
  player.addEventListener("seeked", follow);
});
