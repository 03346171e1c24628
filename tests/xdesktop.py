"""A desktop for tests and benches of ``engram capture``: an Xvfb server on a free display and windows drawn
by python-xlib (text rendered by PIL), the active one announced as a window manager does
(the root window's ``_NET_ACTIVE_WINDOW``)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator


@contextlib.contextmanager
def xvfb(size: str = "1024x600x24") -> Iterator[str]:
    """Run ``Xvfb`` on a free display (``-displayfd``: the server picks it) and yield its DISPLAY (``:N``);
    the server is stopped on exit. Raises RuntimeError when it does not start."""
    read, write = os.pipe()
    proc = subprocess.Popen(["Xvfb", "-displayfd", str(write), "-screen", "0", size, "-nolisten", "tcp"],
                            pass_fds=(write,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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


class Desktop:
    """Windows on an X server, drawn by this process. Windows are 1024 x 300 px at (0, ``y``)."""

    def __init__(self, display: str) -> None:
        from Xlib import display as xdisplay

        self.d = xdisplay.Display(display)
        self.screen = self.d.screen()
        self.root = self.screen.root

    def window(self, title: str, wm_class: tuple[str, str], text: str, y: int = 0):
        """Map a window with ``title`` (WM_NAME and _NET_WM_NAME), WM_CLASS ``(instance, class)`` and ``text``,
        and make it the active one. Returns the Xlib window."""
        win = self.root.create_window(0, y, 1024, 300, 0, self.screen.root_depth,
                                      background_pixel=self.screen.white_pixel)
        win.set_wm_name(title)
        win.change_property(self.d.intern_atom("_NET_WM_NAME"), self.d.intern_atom("UTF8_STRING"), 8, title.encode())
        win.set_wm_class(*wm_class)
        win.map()
        self.d.sync()
        time.sleep(0.2)
        self.draw(win, text)
        self.activate(win)
        return win

    def draw(self, win, text: str, size: int = 44) -> None:
        """Paint ``win`` white with ``text`` in DejaVu Sans at ``size`` px."""
        from PIL import Image, ImageDraw, ImageFont

        img = Image.new("RGB", (1024, 300), "white")
        ImageDraw.Draw(img).text((30, 110), text, fill="black", font=ImageFont.truetype("DejaVuSans.ttf", size))
        gc = win.create_gc(foreground=self.screen.black_pixel, background=self.screen.white_pixel)
        win.put_pil_image(gc, 0, 0, img)
        self.d.sync()

    def activate(self, win) -> None:
        """Set the root's ``_NET_ACTIVE_WINDOW`` to ``win``."""
        from Xlib import Xatom

        self.root.change_property(self.d.intern_atom("_NET_ACTIVE_WINDOW"), Xatom.WINDOW, 32, [win.id])
        self.d.sync()

    def hide(self, win) -> None:
        """Unmap ``win``."""
        win.unmap()
        self.d.sync()
