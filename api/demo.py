"""``engram demo``: make a small realistic sample, run the whole pipeline on it, show what it remembers.

The sample is made on the spot (nothing is downloaded or committed): three rendered screenshots (PIL), a
spoken voice memo (espeak-ng), a short slide clip with speech (ffmpeg), a two-session chat as a JSONL
conversation record, and a README.txt that is not media. It is ingested on the embedded default under
``<workdir>/data`` through the same code as ``engram ingest``, then searched through the query task.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont
from rich.console import Console
from rich.table import Column, Table
from rich.text import Text

from engram.api.console import ingest_summary, print_hits, shown_name
from engram.api.embedded import ingest_paths, run_search

FONT_DIR = Path("/usr/share/fonts/truetype/dejavu")
SIZE = (1280, 800)
CODE = """def reconcile_invoice_batches(ledger, batches, tolerance=0.01):
    \"\"\"Match incoming invoice batches against the ledger.\"\"\"
    unmatched = []
    for batch in batches:
        total = sum(item.amount for item in batch.items)
        expected = ledger.expected_total(batch.batch_id)
        if abs(total - expected) > tolerance:
            unmatched.append(batch.batch_id)
    return unmatched"""
TERMINAL = """sam@db-primary:~$ df -h /var/lib/postgresql
Filesystem      Size  Used Avail Use% Mounted on
/dev/nvme0n1p2  468G  451G   17G  97% /
sam@db-primary:~$ sudo du -sh /var/lib/postgresql/16/main/pg_wal
112G    /var/lib/postgresql/16/main/pg_wal
sam@db-primary:~$ psql -c "select slot_name, active from pg_replication_slots"
   slot_name    | active
----------------+--------
 analytics_sync | f
(1 row)
sam@db-primary:~$ """
EMAIL = [
    "From: Dana Whitfield <dana@harbourview-lettings.com>",
    "To: Sam Carter",
    "Subject: Your lease renewal for Flat 4B, 27 Harbour Street",
    "",
    "Hi Sam,",
    "",
    "Your current lease ends on 30 April. The landlord is happy to renew",
    "for another twelve months at 1,450 pounds per month (up from 1,395).",
    "",
    "Please sign the renewal form and return it by 31 March so we can",
    "register the deposit again. Let me know if you have any questions.",
    "",
    "Kind regards,",
    "Dana",
]
MEMO = (
    "Reminder: the quarterly budget review moved to Thursday at three pm. Bring the updated hiring "
    "plan and the cloud cost numbers. Priya will send the slides by Wednesday."
)
SLIDE = ["Sprint demo", "Release 2.4 ships on Friday", "• Offline sync for mobile", "• Search is 40% faster"]
CLIP_SECONDS = 8
CLIP_SPEECH = "Sprint demo. Release two point four ships on Friday, with offline sync for mobile."
#: Sam is the demo's user (``USER``): his chat turns say who he is in the first person, in turns long enough for the
#: offline extractor's statements (``workers.extract.statements``: 14 words or more) and in its profile patterns
#: ("I work as ...", "I grew up in ...", "I love ..."), so the demo ends with a profile (the ``human`` core block)
CHAT = [  # (session, day offset, speaker, text, attachment caption)
    ("lisbon-1", -3, "Maya", "Hey! Are we still doing the trip to Lisbon in May?", None),
    (
        "lisbon-1",
        -3,
        "Sam",
        "Yes! I was thinking May 16 to 20, flights are cheapest then. I work as a database engineer at Northwind and "
        "our release goes out on the 14th, so I already asked for that week off.",
        None,
    ),
    ("lisbon-1", -3, "Maya", "Perfect. I'll look for a place in Alfama, somewhere with a view.", None),
    (
        "lisbon-1",
        -3,
        "Sam",
        "Sounds great. Can we squeeze in a day in Sintra too? I grew up in Cork and I have never seen a real palace, "
        "so I really want to walk up to Pena Palace.",
        None,
    ),
    (
        "lisbon-1",
        -3,
        "Maya",
        "Definitely. This is the apartment I like.",
        "a sunny balcony overlooking red tiled roofs and a wide river",
    ),
    ("lisbon-2", -1, "Sam", "Booked the flights! Landing at 11:40 on the 16th.", None),
    ("lisbon-2", -1, "Maya", "Amazing. I reserved the Alfama apartment, 460 euros for four nights.", None),
    ("lisbon-2", -1, "Sam", "I'll send you my half tonight.", None),
    ("lisbon-2", -1, "Maya", "Don't forget tickets for tram 28, the queue gets long.", None),
    (
        "lisbon-2",
        -1,
        "Sam",
        "Noted. I'll also book the seafood place near the market for Saturday. I love grilled sardines, and I have "
        "been learning Portuguese on my commute since January.",
        None,
    ),
]
#: The user the sample is ingested for: the chat's Sam (the terminal's sam@, the e-mail's "Hi Sam", his voice memo)
USER = "Sam"
SEARCHES = [  # (query, sample file the first hit should come from, chat message id it should include)
    ("reconcile_invoice_batches", "1-code-editor.png", None),
    ("when is the budget review", "voice-memo.wav", None),
    ("what ships on Friday", "sprint-demo.mp4", None),
    ("trip to Lisbon", "chat-maya.jsonl", "lisbon-1:01"),
]


def _font(size: int, mono: bool = False) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    path = FONT_DIR / ("DejaVuSansMono.ttf" if mono else "DejaVuSans.ttf")
    return ImageFont.truetype(str(path), size) if path.exists() else ImageFont.load_default(size=size)


def _window(title: str, dark: bool) -> tuple[Image.Image, ImageDraw.ImageDraw]:
    """A desktop with one maximised window: title bar, traffic lights, centred title."""
    img = Image.new("RGB", SIZE, (30, 30, 30) if dark else (250, 250, 250))
    draw = ImageDraw.Draw(img)
    draw.rectangle((0, 0, SIZE[0], 38), fill=(50, 50, 52) if dark else (222, 222, 224))
    for i, color in enumerate([(255, 95, 87), (254, 188, 46), (40, 200, 64)]):
        draw.ellipse((14 + 22 * i, 12, 28 + 22 * i, 26), fill=color)
    draw.text((SIZE[0] // 2, 19), title, font=_font(16), anchor="mm", fill=(200, 200, 200) if dark else (60, 60, 60))
    return img, draw


def _code_editor(path: Path) -> None:
    img, draw = _window("invoices.py — billing-service", dark=False)
    draw.rectangle((0, 39, 240, SIZE[1]), fill=(236, 236, 238))
    for i, name in enumerate(["billing-service", "  invoices.py", "  ledger.py", "  tests/"]):
        draw.text((16, 56 + 30 * i), name, font=_font(17), fill=(70, 70, 70))
    draw.rectangle((241, 39, 460, 76), fill=(255, 255, 255))
    draw.text((260, 48), "invoices.py", font=_font(17), fill=(30, 30, 30))
    mono = _font(19, mono=True)
    for n, line in enumerate(CODE.splitlines(), 41):
        y = 100 + (n - 41) * 32
        draw.text((256, y), f"{n:>3}", font=mono, fill=(150, 150, 150))
        color = (0, 90, 170) if line.lstrip().startswith(("def", "for", "if", "return")) else (30, 30, 30)
        draw.text((310, y), line, font=mono, fill=(20, 120, 40) if '"""' in line else color)
    draw.rectangle((0, SIZE[1] - 28, SIZE[0], SIZE[1]), fill=(0, 110, 200))
    draw.text((16, SIZE[1] - 24), "main   Ln 41, Col 9   Spaces: 4   UTF-8   Python 3.12", font=_font(15), fill="white")
    img.save(path)


def _terminal(path: Path) -> None:
    img, draw = _window("sam@db-primary: ~ — ssh — 120×32", dark=True)
    mono = _font(19, mono=True)
    for i, line in enumerate(TERMINAL.splitlines()):
        color = (120, 220, 120) if line.startswith("sam@") else (225, 225, 225)
        draw.text((20, 60 + 30 * i), line, font=mono, fill=color)
    draw.rectangle((215, 60 + 30 * i, 227, 84 + 30 * i), fill=(225, 225, 225))
    img.save(path)


def _email(path: Path) -> None:
    img, draw = _window("Inbox — Mail", dark=False)
    draw.rectangle((0, 39, 330, SIZE[1]), fill=(232, 238, 247))
    for i, (who, subject) in enumerate(
        [("Dana Whitfield", "Your lease renewal"), ("GitHub", "[billing] CI"), ("Priya Nair", "Offsite agenda")]
    ):
        y = 60 + 80 * i
        draw.rectangle((8, y - 8, 322, y + 62), fill=(200, 220, 245) if i == 0 else (232, 238, 247))
        draw.text((20, y), who, font=_font(18), fill=(20, 20, 20))
        draw.text((20, y + 28), subject, font=_font(16), fill=(90, 90, 90))
    for i, line in enumerate(EMAIL):
        draw.text((370, 64 + 34 * i), line, font=_font(19), fill=(25, 25, 25))
    img.save(path)


MEMO_VOICE = ("en-us", "50", "150")  # espeak-ng voice, pitch, words per minute: Sam's memo
CLIP_VOICE = ("en-gb-x-rp+f2", "70", "160")  # whoever presents the sprint demo: another person, another voice


def _speak(text: str, path: Path, voice: tuple[str, str, str] = MEMO_VOICE) -> None:
    name, pitch, speed = voice
    subprocess.run(
        ["espeak-ng", "-v", name, "-p", pitch, "-s", speed, "-w", str(path), text], check=True, capture_output=True
    )


def _clip(out: Path, espeak: bool) -> None:
    """A slide looped as H.264 video with a spoken (or, without espeak-ng, silent) AAC track."""
    with tempfile.TemporaryDirectory(prefix="engram-demo-") as name:
        tmp = Path(name)
        slide = Image.new("RGB", SIZE, (24, 44, 84))
        draw = ImageDraw.Draw(slide)
        for line, size, y in zip(SLIDE, (64, 48, 36, 36), (200, 310, 440, 500), strict=True):
            draw.text((110, y), line, font=_font(size), fill="white")
        slide.save(tmp / "slide.png")
        if espeak:
            _speak(CLIP_SPEECH, tmp / "speech.wav", CLIP_VOICE)
            audio = ["-i", str(tmp / "speech.wav"), "-af", "apad"]  # silence after the speech
        else:
            audio = ["-f", "lavfi", "-i", "anullsrc=r=16000:cl=mono"]
        subprocess.run(
            [
                "ffmpeg",
                "-loglevel",
                "error",
                "-y",
                "-loop",
                "1",
                "-framerate",
                "5",
                "-i",
                str(tmp / "slide.png"),
                *audio,
                "-t",
                str(CLIP_SECONDS),
                "-c:v",
                "libx264",
                "-tune",
                "stillimage",
                "-pix_fmt",
                "yuv420p",
                "-c:a",
                "aac",
                str(out),
            ],
            check=True,
            capture_output=True,
        )


def _chat(path: Path, evening: datetime) -> None:
    from engram.schemas.conversations import Attachment, ConversationMessage
    from engram.workers.media.conversations import to_jsonl

    msgs, counts = [], {}
    for session, day, speaker, text, caption in CHAT:
        counts[session] = counts.get(session, 0) + 1
        msgs.append(
            ConversationMessage(
                message_id=f"{session}:{counts[session]:02d}",
                session_id=session,
                speaker=speaker,
                text=text,
                timestamp=evening + timedelta(days=day, minutes=3 * counts[session]),
                attachments=[Attachment(kind="image", caption=caption)] if caption else [],
            )
        )
    path.write_bytes(to_jsonl(msgs))


def make_samples(sample: Path, morning: datetime) -> dict[str, Path]:
    """Write the sample into ``sample`` with modification times along a morning starting at ``morning``;
    returns {file name: path}. Audio and the clip are left out when espeak-ng or ffmpeg is missing."""
    sample.mkdir(parents=True, exist_ok=True)
    espeak, ffmpeg = shutil.which("espeak-ng") is not None, shutil.which("ffmpeg") is not None
    made: dict[str, datetime] = {}
    if espeak:
        _speak(MEMO, sample / "voice-memo.wav")
        made["voice-memo.wav"] = morning
    screens = [("1-code-editor.png", _code_editor), ("2-terminal.png", _terminal), ("3-email.png", _email)]
    for i, (name, render) in enumerate(screens, 1):  # 45 min apart: separate episodes when consolidated
        render(sample / name)
        made[name] = morning + timedelta(minutes=45 * i)
    if ffmpeg:
        _clip(sample / "sprint-demo.mp4", espeak)
        made["sprint-demo.mp4"] = morning + timedelta(minutes=180)
    _chat(sample / "chat-maya.jsonl", morning.replace(hour=20))
    made["chat-maya.jsonl"] = morning.replace(hour=21) - timedelta(days=1)
    (sample / "README.txt").write_text("Sample made by `engram demo`. Not media, so ingest skips it.\n")
    made["README.txt"] = morning
    for name, when in made.items():
        os.utime(sample / name, (when.timestamp(), when.timestamp()))
    return {name: sample / name for name in sorted(made)}


def _profile(rt) -> str:
    """The demo user's ``human`` core block as consolidation wrote it ("occupation: ...", one fact a line), or ""."""
    from engram.schemas.ids import memory_id  # with the pipeline's other imports, once the sample is made
    from engram.schemas.memories import MemoryType

    got = rt.vectors.retrieve(MemoryType.core.value, [memory_id("demo", USER, MemoryType.core.value, "human")])
    return (got[0].payload or {}).get("value", "") if got else ""


def run_demo(workdir: Path | None, console: Console) -> dict:
    """Make the sample in ``workdir/sample``, ingest it (and consolidate) on the embedded default under
    ``workdir/data`` for ``USER``, print what was stored, the user's profile and a few searches. Returns {'workdir',
    'files', 'ingest' (``ingest_paths``'s result), 'counts' (points per collection), 'profile' (the user's core
    block), 'searches' (a list of {'query', 'expect': the sample file it is about, 'message_id': the chat message or
    None, 'response'}), 'seconds'}."""
    from engram.api.processes import warm_up_for_searches
    from engram.schemas.search import SearchRequest
    from engram.workers.runtime import reset_runtimes, runtime
    from engram.workers.stores.vectors import COLLECTIONS, tenant_filter

    if os.environ.get("ENGRAM_BROKER_URL"):
        raise RuntimeError("the demo runs on the embedded default: unset ENGRAM_BROKER_URL")
    started = time.monotonic()
    workdir = Path(workdir or tempfile.mkdtemp(prefix="engram-demo-")).resolve()
    now = datetime.now().astimezone()
    morning = now.replace(hour=8, minute=40, second=0, microsecond=0)
    morning -= timedelta(days=1 if now.hour < 12 else 0)  # a morning that is over
    console.rule("[bold]engram demo")
    files = make_samples(workdir / "sample", morning)
    console.print(Text(f"Sample written to {workdir / 'sample'}: {', '.join(files)}"))
    for tool in ("espeak-ng", "ffmpeg"):
        if not shutil.which(tool):
            console.print(f"[yellow]{tool} not found[/yellow]: its part of the sample was left out")

    saved = {k: os.environ.get(k) for k in ("ENGRAM_DATA_DIR", "ENGRAM_QDRANT_URL", "ENGRAM_S3_ENDPOINT")}
    os.environ["ENGRAM_DATA_DIR"] = str(workdir / "data")
    os.environ.pop("ENGRAM_QDRANT_URL", None)
    os.environ.pop("ENGRAM_S3_ENDPOINT", None)
    reset_runtimes()
    warm_up_for_searches()  # the searches after the ingest: the time parser is ready for the first to name a time
    try:
        console.print("Ingesting: OCR, speech-to-text, embeddings, then consolidation (a minute or less)…")
        result = ingest_paths([workdir / "sample"], tenant="demo", user=USER, device="demo-laptop", consolidate=True)
        console.print(ingest_summary(result), highlight=False)
        notes = [*result["ignored"], *((p, r.reason) for p, r in result["skipped"] + result["failed"])]
        for path, why in notes:
            console.print(Text(f"  {shown_name(path.name)}: {why}"))
        rt = runtime()
        counts = {name: rt.vectors.count(name, tenant_filter("demo")) for name in COLLECTIONS}
        table = Table("collection", Column("points", justify="right"), title="points stored")
        for name, n in counts.items():
            table.add_row(name, str(n))
        console.print(table)
        profile = _profile(rt)
        console.print(
            Text(
                f"What engram knows about {USER} (core memory, `human` block):\n  "
                + (profile or "(nothing yet)").replace("\n", "\n  ")
            )
        )
        searches = []
        for query, expect, message_id in SEARCHES:
            if expect in files:
                resp = run_search(SearchRequest(query=query, tenant_id="demo", limit=3))
                print_hits(resp, console)
                searches.append({"query": query, "expect": expect, "message_id": message_id, "response": resp})
    finally:
        reset_runtimes()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    seconds = time.monotonic() - started
    console.print(
        Text(
            f"\nDone in {seconds:.0f} s. The data is in {workdir / 'data'}; search it again with\n"
            f'  engram --data-dir {workdir / "data"} search "when does the lease end" --tenant demo\n'
            f"  engram --data-dir {workdir / 'data'} status --tenant demo\n"
            f"or look at it in a browser (the web app on http://127.0.0.1:8780/):\n"
            f"  engram ui --data-dir {workdir / 'data'} --tenant demo"
        )
    )
    return {
        "workdir": workdir,
        "files": files,
        "ingest": result,
        "counts": counts,
        "profile": profile,
        "searches": searches,
        "seconds": seconds,
    }
