"""Checks of what a user passes in, shared by the command line, the app and the runner.

Each check returns the value in its canonical form or raises InputError with one line that says
what is allowed. Nothing here loads a model or writes a file, so every check can run before any
work starts. Sampling settings and method parameters check themselves (specviz.models.settings,
specviz.decoding.params); traces are checked on load (specviz.trace).
"""

from __future__ import annotations

import math
import os
import reprlib
import shutil
import tempfile
import unicodedata
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import torch

T = TypeVar("T")
MAX_PROMPT_CHARS = 2000
QUOTED_CHARS = 40  # a bad value is quoted in a message up to this many characters
QUOTED_PATH_CHARS = 160  # a path, whose end says most, is quoted in full up to this many characters
_SHORT_REPR = reprlib.Repr()  # containers and other values, shortened as `brief` quotes them
_SHORT_REPR.maxstring = _SHORT_REPR.maxother = QUOTED_CHARS
_SHORT_REPR.maxlist = _SHORT_REPR.maxtuple = _SHORT_REPR.maxdict = 6
MAX_SEED = 2**63 - 1  # torch generators take 64-bit seeds; keep to the non-negative half
MAX_PROMPTS = 1000
MAX_PROMPT_FILE_BYTES = 1024 * 1024


class InputError(ValueError):
    """A value a user can correct; the message says how."""


def brief(value: object, limit: int = QUOTED_CHARS) -> str:
    """`value` as a message quotes it: its repr cut to about `limit` characters, with the full length
    of a long text said, so a hostile megabyte costs one short line in the reply and in the log (the
    cut is made before the repr, which would otherwise copy the whole value)."""
    if isinstance(value, str | bytes):
        if len(value) > limit:
            return f"{value[:limit]!r}... ({len(value)} {'characters' if isinstance(value, str) else 'bytes'})"
        return repr(value)
    return _SHORT_REPR.repr(value)


class PromptError(InputError):
    """An empty, oversized or undecodable prompt."""


def check_prompt(prompt: object) -> str:
    """The prompt as NFC-normalised text without surrounding whitespace or control characters."""
    if not isinstance(prompt, str):
        raise PromptError("the prompt must be text, for example 'red apple'")
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError:  # bytes that were not UTF-8 on the command line, or a lone surrogate
        raise PromptError("the prompt is not valid UTF-8 text") from None
    text = unicodedata.normalize("NFC", prompt)
    text = "".join(" " if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") else c for c in text).strip()
    if not text:
        raise PromptError("the prompt is empty; describe an image, for example 'red apple'")
    if len(text) > MAX_PROMPT_CHARS:
        raise PromptError(f"the prompt has {len(text)} characters; the limit is {MAX_PROMPT_CHARS}")
    return text


def check_seed(seed: object) -> int:
    """A seed from 0 to 2**63 - 1; an integral float (as a UI may send) is accepted."""
    if isinstance(seed, float) and math.isfinite(seed) and seed.is_integer():
        seed = int(seed)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise InputError(f"the seed must be an integer from 0 to {MAX_SEED}, got {brief(seed)}")
    return seed


def check_device(name: object) -> torch.device:
    """A torch device this machine has: the CPU, or a CUDA (or Apple MPS) device that is present."""
    import torch  # here, not at the top: the command line answers --help and argument errors without torch

    if not isinstance(name, str) or not name.strip():
        raise InputError("the device must be named, for example cpu or cuda")
    try:
        device = torch.device(name.strip())
    except (RuntimeError, ValueError):
        raise InputError(f"unknown device {brief(name)}; use cpu or cuda (cuda:N for the N-th GPU)") from None
    if device.type == "cpu":
        return device
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise InputError(f"device {brief(name)}: CUDA is not available on this machine; use --device cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise InputError(f"device {brief(name)}: this machine has {torch.cuda.device_count()} CUDA device(s)")
        return device
    if device.type == "mps" and torch.backends.mps.is_available():
        return device
    raise InputError(f"device {brief(name)} is not available here; use cpu or cuda")


def look_up(table: Mapping[str, T], name: str, what: str, error: type[Exception], listed: str = "available") -> T:
    """`table[name]`, or `error` quoting the name and listing what there is ("unknown method 'x'; available: ...")."""
    if name not in table:
        raise error(f"unknown {what} {brief(name)}; {listed}: {', '.join(table)}")
    return table[name]


def shown_path(path: object) -> str:
    """A path as a message quotes it: in full unless it is long enough to flood the line."""
    text = str(path)
    return text if len(text) <= QUOTED_PATH_CHARS else brief(text, QUOTED_PATH_CHARS)


def read_bounded(path: str | Path, limit: int, what: str, error: type[Exception] = InputError) -> bytes:
    """The bytes of a regular file of at most `limit` bytes, reading no more than that; otherwise `error`
    saying why, `what` naming the file ("trace", "prompt file"). A folder, a device or a FIFO is refused
    before it is opened: reading one could block."""
    shown = shown_path(path)
    try:
        if not os.path.isfile(path):
            if os.path.exists(path):
                raise error(f"{what} {shown} is not a regular file")
            raise FileNotFoundError(2, "No such file or directory")
        with open(path, "rb") as file:
            data = file.read(limit + 1)
    except OSError as failure:
        raise error(f"cannot read {what} {shown}: {failure.strerror or failure}") from None
    if len(data) > limit:
        raise error(f"{what} {shown} is larger than {limit} bytes, the limit for a {what}")
    return data


def _refuse_git_folder(path: Path) -> None:
    """Nothing is written into a `.git` folder (a repository's own store), however the path reaches it."""
    for candidate in (path, Path(os.path.realpath(path))):  # Path.resolve raises on a symbolic-link loop
        if any(part.casefold() == ".git" for part in candidate.parts):
            raise InputError(f"cannot write to {shown_path(path)}: it is inside a .git folder; choose another folder")


def missing_folders(path: Path) -> list[Path]:
    """The folders that would have to be created for `path` to exist, the deepest first."""
    missing: list[Path] = []
    while not path_exists(missing[-1].parent if missing else path):
        missing.append(missing[-1].parent if missing else path)
    return missing


def check_output_folder(folder: object, files: tuple[str, ...] = ()) -> Path:
    """A folder that exists or can be created, is writable, and where `files` can be written (no
    directory already holds their names). Probed by creating a temporary file (and any missing folders)
    and removing them again, since permission bits do not tell (root passes them, /proc refuses anyway);
    nothing is left behind."""
    if not isinstance(folder, str | os.PathLike) or not str(folder).strip():
        raise InputError("the output folder must be named (--out DIR)")
    path = Path(folder).expanduser()
    created = []
    try:
        _refuse_git_folder(path)
        for directory in reversed(missing_folders(path)):
            directory.mkdir()
            created.append(directory)
        if not path.is_dir():
            raise InputError(f"cannot write to {shown_path(path)}: it is not a folder")
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as error:  # a name too long for the file system included
        raise InputError(f"cannot write to {shown_path(path)}: {error.strerror or error}") from None
    finally:
        for directory in reversed(created):
            directory.rmdir()
    for name in files:
        target = path / name
        try:
            if target.exists() and not target.is_file():
                raise InputError(f"cannot write {shown_path(target)}: something other than a file is already there")
            if target.exists() and not os.access(target, os.W_OK):
                raise InputError(f"cannot write {shown_path(target)}: it is not writable")
        except OSError as error:
            raise InputError(f"cannot write {shown_path(target)}: {error.strerror or error}") from None
    return path


@contextmanager
def output_folder(path: Path) -> Iterator[Path]:
    """`path` created (with any missing parents) for the work inside the block; when the block fails,
    the folders it created are removed again with whatever was written into them, so a failed command
    leaves nothing behind. Check the folder with `check_output_folder` first."""
    missing = missing_folders(path)
    path.mkdir(parents=True, exist_ok=True)
    try:
        yield path
    except BaseException:
        if missing:
            shutil.rmtree(missing[-1], ignore_errors=True)
        raise


def path_exists(path: Path) -> bool:
    """Whether anything is at `path` (a broken symbolic link counts: nothing can be created there)."""
    return path.exists() or path.is_symlink() or path.parent == path


def check_output_file(file: object) -> Path:
    """A file path whose folder passes `check_output_folder` and that is not a folder itself."""
    if not isinstance(file, str | os.PathLike) or not str(file).strip():
        raise InputError("the output file must be named")
    path = Path(file).expanduser()
    check_output_folder(path.parent if str(path.parent) else ".", (path.name,))
    _refuse_git_folder(path)  # a file named .git, too
    return path


class PromptFileError(InputError):
    """A prompt file that cannot be read or holds no usable prompt."""


def read_prompts(path: str | None) -> list[str]:
    """Prompts from a UTF-8 file, one per line (blank lines and #-comments skipped), at most
    MAX_PROMPTS of them; default: the shipped set."""
    if path is None:
        text = resources.files("specviz.data").joinpath("prompts.txt").read_text()
    else:
        data = read_bounded(path, MAX_PROMPT_FILE_BYTES, "prompt file", PromptFileError)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise PromptFileError(f"cannot read prompt file {shown_path(path)}: {error}") from None
    prompts = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if not prompts:
        raise PromptFileError(f"no prompts in {shown_path(path)}")
    if len(prompts) > MAX_PROMPTS:
        raise PromptFileError(f"{len(prompts)} prompts in {shown_path(path)}; the limit is {MAX_PROMPTS}")
    return prompts
