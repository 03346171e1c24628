"""A desktop for tests and benches of ``engram capture``: an Xvfb server on a free display, windows drawn by
python-xlib (text rendered by PIL) with the properties a test asks for (``_NET_WM_NAME`` or only ``WM_NAME``,
Latin-1 or invalid UTF-8 titles, malformed root properties, windows that vanish while being read), the active
one announced as a window manager does (the root window's ``_NET_ACTIVE_WINDOW``); or a real window manager
(``openbox``) and real ``xterm`` windows, typed into by ``xdotool``."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator


@contextlib.contextmanager
def xvfb(size: str = "1024x600x24") -> Iterator[str]:
    """Run ``Xvfb`` on a free display (``-displayfd``: the server picks it) and yield its DISPLAY (``:N``);
    the server is stopped on exit. Raises RuntimeError when it does not start."""
    read, write = os.pipe()
    proc = subprocess.Popen(
        ["Xvfb", "-displayfd", str(write), "-screen", "0", size, "-nolisten", "tcp"],
        pass_fds=(write,),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(write)
    with os.fdopen(read) as fh:
        number = fh.readline().strip()
    try:
        if not number:
            raise RuntimeError("Xvfb did not start")
        yield f":{number}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def have_real_desktop() -> bool:
    """Whether ``openbox``, ``xterm`` and ``xdotool`` are installed (``bash scripts/setup.sh --dev``)."""
    return all(shutil.which(tool) for tool in ("openbox", "xterm", "xdotool"))


class Desktop:
    """Windows on an X server, drawn by this process (one connection: one thread uses it). Windows are
    1024 x 300 px at (0, ``y``) unless given a ``size``."""

    def __init__(self, display: str) -> None:
        from Xlib import display as xdisplay

        self.d = xdisplay.Display(display)
        self.screen = self.d.screen()
        self.root = self.screen.root

    def close(self) -> None:
        """Close the connection (its windows go with it)."""
        self.d.close()

    def window(
        self,
        title: str,
        wm_class: tuple[str, str],
        text: str,
        y: int = 0,
        *,
        net_wm_name: bool | bytes = True,
        wm_name: bytes | None = None,
        activate: bool = True,
        size: tuple[int, int] = (1024, 300),
    ):
        """Map a window with ``title``, WM_CLASS ``(instance, class)`` and ``text``, and make it the active one
        (``activate``). ``WM_NAME`` (type ``STRING``) holds ``wm_name``'s bytes, default ``title`` in Latin-1
        (unencodable characters as ``?``); ``_NET_WM_NAME`` (``UTF8_STRING``) holds ``title`` in UTF-8
        (``net_wm_name`` True), the given bytes (e.g. invalid UTF-8), or is left out (False: as xterm does).
        Returns the Xlib window."""
        win = self.root.create_window(0, y, *size, 0, self.screen.root_depth, background_pixel=self.screen.white_pixel)
        self.retitle(win, title, net_wm_name=net_wm_name, wm_name=wm_name)
        win.set_wm_class(*wm_class)
        win.map()
        self.d.sync()
        time.sleep(0.2)
        self.draw(win, text)
        if activate:
            self.activate(win)
        return win

    def retitle(self, win, title: str, *, net_wm_name: bool | bytes = True, wm_name: bytes | None = None) -> None:
        """Set ``win``'s title (``WM_NAME`` and ``_NET_WM_NAME`` as ``window`` says)."""
        from Xlib import Xatom

        raw = wm_name if wm_name is not None else title.encode("latin-1", "replace")
        win.change_property(Xatom.WM_NAME, Xatom.STRING, 8, raw)
        if net_wm_name is not False:
            value = title.encode() if net_wm_name is True else net_wm_name
            win.change_property(self.d.intern_atom("_NET_WM_NAME"), self.d.intern_atom("UTF8_STRING"), 8, value)
        self.d.sync()

    def draw(self, win, text: str, size: int = 44) -> None:
        """Paint ``win`` white with ``text`` in DejaVu Sans at ``size`` px."""
        from PIL import Image, ImageDraw, ImageFont

        img = Image.new("RGB", (1024, 300), "white")
        ImageDraw.Draw(img).text((30, 110), text, fill="black", font=ImageFont.truetype("DejaVuSans.ttf", size))
        self.paint(win, img)

    def paint(self, win, img) -> None:
        """Put the PIL RGB image ``img`` at ``win``'s top left."""
        gc = win.create_gc(foreground=self.screen.black_pixel, background=self.screen.white_pixel)
        win.put_pil_image(gc, 0, 0, img)
        self.d.sync()

    def activate(self, win) -> None:
        """Set the root's ``_NET_ACTIVE_WINDOW`` to ``win``."""
        from Xlib import Xatom

        self.root.change_property(self.d.intern_atom("_NET_ACTIVE_WINDOW"), Xatom.WINDOW, 32, [win.id])
        self.d.sync()

    def root_property(self, name: str, type_name: str, fmt: int, value) -> None:
        """Set the root's property ``name`` to ``value`` of type ``type_name`` and format ``fmt`` (8: bytes,
        32: a list of numbers), whatever the property should hold: a malformed ``_NET_ACTIVE_WINDOW`` or
        ``_NET_CLIENT_LIST`` as a broken window manager would leave it."""
        self.root.change_property(self.d.intern_atom(name), self.d.intern_atom(type_name), fmt, value)
        self.d.sync()

    def clear_root_property(self, name: str) -> None:
        """Delete the root's property ``name``."""
        self.root.delete_property(self.d.intern_atom(name))
        self.d.sync()

    def hide(self, win) -> None:
        """Unmap ``win``."""
        win.unmap()
        self.d.sync()

    def destroy(self, win) -> None:
        """Destroy ``win`` (its id then names no window)."""
        win.destroy()
        self.d.sync()


@contextlib.contextmanager
def vanishing_windows(display: str, period: float = 0.01) -> Iterator[threading.Event]:
    """A thread on its own connection that, every ``period`` s, maps a window, lists it in the root's
    ``_NET_CLIENT_LIST`` and ``_NET_ACTIVE_WINDOW`` and destroys it at once, so a reader of the window list
    meets ids of windows that are gone. Yields an event that is set once the first window came and went."""
    first, stop = threading.Event(), threading.Event()

    def churn() -> None:
        from Xlib import Xatom

        desk = Desktop(display)
        try:
            while not stop.is_set():
                win = desk.root.create_window(0, 0, 200, 100, 0, desk.screen.root_depth)
                win.change_property(Xatom.WM_NAME, Xatom.STRING, 8, b"gone soon")
                win.map()
                desk.root_property("_NET_CLIENT_LIST", "WINDOW", 32, [win.id])
                desk.activate(win)
                desk.destroy(win)
                first.set()
                stop.wait(period)
        finally:
            desk.close()

    thread = threading.Thread(target=churn, name="vanishing-windows", daemon=True)
    thread.start()
    try:
        yield first
    finally:
        stop.set()
        thread.join(timeout=10)


def _wait_for(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not appear within {timeout:g} s")


@contextlib.contextmanager
def openbox(display: str) -> Iterator[subprocess.Popen]:
    """Run the ``openbox`` window manager on ``display`` until exit; yields once it manages the screen (the
    root's ``_NET_SUPPORTING_WM_CHECK`` is set). Raises RuntimeError when it does not start."""
    proc = subprocess.Popen(
        ["openbox", "--sm-disable"],
        env={**os.environ, "DISPLAY": display},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    desk = Desktop(display)
    try:
        check = desk.d.intern_atom("_NET_SUPPORTING_WM_CHECK")
        _wait_for(lambda: desk.root.get_full_property(check, 0) is not None, 20, "openbox")
        yield proc
    finally:
        desk.close()
        proc.terminate()
        proc.wait(timeout=10)


@contextlib.contextmanager
def xterm(display: str, command: str, title: str | None = None, geometry: str = "100x20+0+0") -> Iterator[int]:
    """Run a real ``xterm`` on ``display`` running ``sh -c command`` (``-T title``: its WM_NAME; xterm never
    sets ``_NET_WM_NAME``) and ``-hold`` after it; yields its window id (the client window, class ``XTerm``)
    once mapped. The terminal is stopped on exit."""
    args = ["xterm", "-hold", "-geometry", geometry, "-fa", "DejaVu Sans Mono", "-fs", "13"]
    proc = subprocess.Popen(
        [*args, *(["-T", title] if title else []), "-e", "sh", "-c", command],
        env={**os.environ, "DISPLAY": display},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wid = _wait_for(
            lambda: _xdotool(display, "search", "--sync", "--onlyvisible", "--pid", str(proc.pid)), 20, "xterm's window"
        )
        yield int(wid.split()[0])
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _xdotool(display: str, *args: str) -> str:
    out = subprocess.run(
        ["xdotool", *args], env={**os.environ, "DISPLAY": display}, capture_output=True, text=True, timeout=30
    )
    return out.stdout.strip()


def type_text(display: str, window: int, text: str, delay_ms: int = 60) -> None:
    """Type ``text`` into ``window`` with ``xdotool`` (focused first through the window manager; the keys go
    through XTEST, as xterm ignores synthetic events), ``delay_ms`` between keys."""
    activate(display, window)
    subprocess.run(
        ["xdotool", "type", "--delay", str(delay_ms), text],
        env={**os.environ, "DISPLAY": display},
        check=True,
        timeout=600,
    )


def activate(display: str, window: int) -> None:
    """Ask the window manager to raise and focus ``window`` (``xdotool windowactivate``)."""
    _xdotool(display, "windowactivate", "--sync", str(window))
