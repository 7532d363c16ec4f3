"""LlamaGen-T2I's caption cleaning, as its T5 embedder (`language/t5.py`, taken from PixArt-alpha) runs it
before FLAN-T5 at training and sampling time (twice, in `text_preprocessing`): the model only ever saw
cleaned captions, so the prompt is cleaned the same way.

The steps, in the release's order: undo URL quoting, strip and lower-case, drop URLs, HTML tags,
@nicknames and CJK characters, unify dashes and quotes, drop stray HTML entities, IP addresses,
ids, long numbers and file names, turn runs of quotes, dots and odd punctuation into one character or
a space, split words joined by more than three dashes or underscores, then drop shop words (shipping,
download, click for ...), image extensions, page numbers, sizes such as 1024x768 and code-like words
(jc6640), fix the spacing around punctuation and trim quotes and punctuation at the ends.

Departures: the release uses BeautifulSoup for the HTML text and `ftfy.fix_text`, neither of which
specviz installs. The HTML text comes from the standard library's `html.parser` here, the parser
BeautifulSoup's "html.parser" feature drives, with BeautifulSoup's handling of references and scripts.
Of `ftfy.fix_text`'s default fixes, `repair_text` keeps the plain ones (terminal escapes, Latin
ligatures, full- and half-width forms, curly quotes, line breaks, control characters, NFC) and leaves
out its encoding repairs, so mojibake (text decoded with the wrong codec, which a typed prompt rarely
holds) stays as it is. Checked against the release's code (ftfy 6.3, BeautifulSoup 4.15): the same
result for every prompt of specviz's prompt sets and for 20,000 random strings but one, an encoding
repair.
"""

from __future__ import annotations

import html
import html.entities
import re
import unicodedata
from html.parser import HTMLParser
from urllib.parse import unquote_plus

# a URL: a scheme (or "www:"), or a host name ending in one of these domains, with its path
DOMAINS = "com|co|ru|net|org|edu|gov|it"
FILE_TYPES = "png|jpg|jpeg|bmp|webp|eps|pdf|apk|mp4"
DASHES = (
    "\u002d\u058a\u05be\u1400\u1806\u2010-\u2015\u2e17\u2e1a\u2e3a\u2e3b\u2e40\u301c\u3030\u30a0"
    "\ufe31\ufe32\ufe58\ufe63\uff0d"
)
ODD_PUNCTUATION = r"#®•©™&@·º½¾¿¡§~)(\]\[}{|\\/*"


def _url(scheme: str) -> re.Pattern:
    host = rf"[a-zA-Z0-9.\-]+[.](?:{DOMAINS})[\w/-]*\b\/?(?!@)"
    return re.compile(rf"\b((?:{scheme}:(?:\/{{1,3}}|[a-zA-Z0-9%])|{host}))")


# (pattern, replacement) in the release's order; each group is one step of the module docstring
BEFORE_HTML = (
    (re.compile(r"<person>"), "person"),
    (_url("https?"), ""),
    (_url("www"), ""),
)
AFTER_HTML = (
    (re.compile(r"@[\w\d]+\b"), ""),  # @nickname
    (re.compile(r"[\u31c0-\u9fff]+"), ""),  # CJK strokes .. unified ideographs (31C0-9FFF, seven blocks)
    (re.compile(f"[{DASHES}]+"), "-"),
    (re.compile(r"[`´«»“”¨]"), '"'),
    (re.compile(r"[‘’]"), "'"),
    (re.compile(r"&quot;?"), ""),
    (re.compile(r"&amp"), ""),
    (re.compile(r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}"), " "),  # IP addresses
    (re.compile(r"\d:\d\d\s+$"), ""),  # article ids
    (re.compile(r"\\n"), " "),  # a written-out newline
    (re.compile(r"#\d{1,3}\b"), ""),
    (re.compile(r"#\d{5,}\b"), ""),
    (re.compile(r"\b\d{6,}\b"), ""),
    (re.compile(rf"[\S]+\.(?:{FILE_TYPES})"), ""),  # file names
    (re.compile(r"[\"']{2,}"), '"'),
    (re.compile(r"[\.]{2,}"), " "),
    (re.compile(f"[{ODD_PUNCTUATION}]+"), " "),
    (re.compile(r"\s+\.\s+"), " "),
)
JOINERS = re.compile(r"[-_]")  # this-is-my-cute-cat
# ftfy's plain fixes: terminal colour escapes, control characters (whitespace ones kept), Latin
# ligatures and digraphs, full- and half-width forms, curly quotes, line breaks
TERMINAL_ESCAPE = re.compile("\033\\[((?:\\d|;)*)([a-zA-Z])")
CONTROL = dict.fromkeys([*range(0x09), 0x0B, *range(0x0E, 0x20), 0x7F, *range(0x206A, 0x2070), 0xFEFF])
CONTROL.update(dict.fromkeys(range(0xFFF9, 0xFFFD)))
LIGATURES = {ord(c): unicodedata.normalize("NFKC", c) for c in "ĲĳŉǱǲǳǄǅǆǇǈǉǊǋǌﬀﬁﬂﬃﬄﬆ"} | {ord("ﬅ"): "ſt"}
WIDTH = {0x3000: " "} | {
    code: unicodedata.normalize("NFKC", chr(code))
    for code in range(0xFF01, 0xFFF0)
    if unicodedata.normalize("NFKC", chr(code)) != chr(code)
}
SINGLE_QUOTES = re.compile("[\u02bc\u2018-\u201b]")
DOUBLE_QUOTES = re.compile("[\u201c-\u201f]")
LINE_BREAKS = re.compile("\r\n|[\r\u2028\u2029\u0085]")
AFTER_REPAIR = (
    (re.compile(r"\b[a-zA-Z]{1,3}\d{3,15}\b"), ""),  # jc6640
    (re.compile(r"\b[a-zA-Z]+\d+[a-zA-Z]+\b"), ""),  # jc6640vc
    (re.compile(r"\b\d+[a-zA-Z]+\d+\b"), ""),  # 6640vc231
    (re.compile(r"(worldwide\s+)?(free\s+)?shipping"), ""),
    (re.compile(r"(free\s)?download(\sfree)?"), ""),
    (re.compile(r"\bclick\b\s(?:for|on)\s\w+"), ""),
    (re.compile(rf"\b(?:{FILE_TYPES})(\simage[s]?)?"), ""),
    (re.compile(r"\bpage\s+\d+\b"), ""),
    (re.compile(r"\b\d*[a-zA-Z]+\d+[a-zA-Z]+\d+[a-zA-Z\d]*\b"), " "),  # j2d1a2a...
    (re.compile(r"\b\d+\.?\d*[xх×]\d+\.?\d*\b"), ""),  # sizes, with a Latin or Cyrillic x
    (re.compile(r"\b\s+\:\s+"), ": "),
    (re.compile(r"(\D[,\./])\b"), r"\1 "),
    (re.compile(r"\s+"), " "),
    (re.compile(r"^[\"\']([\w\W]+)[\"\']$"), r"\1"),  # a caption in quotes
    (re.compile(r"^[\'\_,\-\:;]"), ""),
    (re.compile(r"[\'\_,\-\:\-\+]$"), ""),
    (re.compile(r"^\.\S+$"), ""),
)


class _Text(HTMLParser):
    """The text of an HTML fragment as BeautifulSoup's `.text` gives it: tags, comments, declarations
    and the insides of script, style and template out; a named reference decoded where HTML names it
    (with or without its semicolon) and kept as "&name" where not; a numeric one decoded."""

    HIDDEN = ("script", "style", "template")

    def __init__(self):
        super().__init__(convert_charrefs=False)
        self.parts: list[str] = []
        self.hidden = 0

    def handle_starttag(self, tag: str, attrs) -> None:
        self.hidden += tag in self.HIDDEN

    def handle_endtag(self, tag: str) -> None:
        if tag in self.HIDDEN and self.hidden:
            self.hidden -= 1

    def handle_data(self, data: str) -> None:
        if not self.hidden:
            self.parts.append(data)

    def handle_entityref(self, name: str) -> None:
        self.handle_data(html.entities.html5.get(f"{name};", f"&{name}"))

    def handle_charref(self, name: str) -> None:
        hexadecimal = name[:1] in "xX"
        digits = re.match(r"[0-9a-fA-F]+" if hexadecimal else r"[0-9]+", name[1:] if hexadecimal else name)
        if digits is None:
            self.handle_data(name)
            return
        code = int(digits.group(), 16 if hexadecimal else 10)
        self.handle_data(chr(code) if 0 < code < 0x110000 else "\ufffd")
        self.handle_data(name[digits.end() + hexadecimal :])


def html_text(fragment: str) -> str:
    """The text of an HTML fragment (see `_Text`)."""
    parser = _Text()
    parser.feed(fragment)
    parser.close()
    return "".join(parser.parts)


def repair_text(text: str) -> str:
    """The release's `basic_clean`: `ftfy.fix_text` (its plain fixes, see the module docstring), HTML
    unescaped twice, stripped."""
    text = TERMINAL_ESCAPE.sub("", text).translate(LIGATURES).translate(WIDTH)
    text = SINGLE_QUOTES.sub("'", DOUBLE_QUOTES.sub('"', text))
    text = LINE_BREAKS.sub("\n", text).translate(CONTROL)
    text = unicodedata.normalize("NFC", text)
    return html.unescape(html.unescape(text)).strip()


def _apply(steps, text: str) -> str:
    for pattern, replacement in steps:
        text = pattern.sub(replacement, text)
    return text


def clean_caption(caption: str) -> str:
    """One pass of the release's caption cleaning (it runs two)."""
    text = unquote_plus(str(caption)).strip().lower()
    text = html_text(_apply(BEFORE_HTML, text))
    text = _apply(AFTER_HTML, text)
    if len(JOINERS.findall(text)) > 3:
        text = JOINERS.sub(" ", text)
    text = _apply(AFTER_REPAIR, repair_text(text))
    return text.strip()
