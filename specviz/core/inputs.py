"""Checks of what a user passes in, shared by the command line, the app and the runner.

Each check returns the value in its canonical form or raises InputError with one line that says
what is allowed. Nothing here loads a model, and the checks write no file, so every check can run
before any work starts. Sampling settings and method parameters check themselves
(specviz.core.settings, specviz.core.params); traces are checked on load (specviz.trace).

A results folder (`bench --out DIR`, read again on resume and by `bench-report`) is untrusted input:
`read_inside`, `read_json_inside`, `write_inside` and their siblings reach a file in it one folder at a
time from the folder itself, never through a symbolic link (a link where a folder is expected is
refused; a link at a file to be written is replaced, never written through), read regular files only,
bounded, and write each file whole under a temporary name moved into place. They need POSIX's `dir_fd`
calls (Linux, macOS).
"""

from __future__ import annotations

import json
import math
import os
import reprlib
import secrets
import shutil
import stat
import tempfile
import unicodedata
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
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
            if target.is_symlink() and not target.exists():  # writing through it would fail only after the work
                raise InputError(f"cannot write {shown_path(target)}: it is a symbolic link to a missing file")
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


class FolderError(InputError):
    """A file or folder inside a results folder that cannot be read or written safely; the message names it."""


MAX_JSON_CONTAINERS = 10_000  # lists and objects in one JSON file of a results folder (a result holds a handful)
_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _parts(relative: str | Path) -> tuple[str, ...]:
    """The names of a path below a folder; nothing absolute and no `..`, so the path stays in the folder."""
    parts = Path(relative).parts
    if not parts or Path(relative).is_absolute() or any(part in (".", "..") for part in parts):
        raise FolderError(f"{shown_path(relative)} is not a path inside the folder")
    return parts


def _kind(info: os.stat_result) -> str:
    """What an entry is, as a message says it."""
    if stat.S_ISLNK(info.st_mode):
        return "a symbolic link (nothing in a results folder is followed through a link)"
    if stat.S_ISDIR(info.st_mode):
        return "a folder"
    if stat.S_ISFIFO(info.st_mode):
        return "a named pipe"
    if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode):
        return "a device"
    return "not a regular file" if not stat.S_ISREG(info.st_mode) else "a file"


def _open_inside(root: Path, folders: tuple[str, ...], create: bool) -> int | None:
    """A descriptor of the folder `root/folders...`, reached one real folder at a time; None where one is missing
    (without `create`)."""
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        if create:
            raise FolderError(f"cannot write to {shown_path(root)}: the folder does not exist") from None
        return None
    except OSError as failure:
        raise FolderError(f"cannot open {shown_path(root)}: {failure.strerror or failure}") from None
    try:
        for depth, name in enumerate(folders):
            where = shown_path(Path(root, *folders[: depth + 1]))
            if create:
                try:
                    os.mkdir(name, dir_fd=fd)
                except FileExistsError:
                    pass
                except OSError as failure:
                    raise FolderError(f"cannot create {where}: {failure.strerror or failure}") from None
            try:
                child = os.open(name, _FOLDER_FLAGS, dir_fd=fd)
            except OSError as failure:
                try:
                    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    info = None
                if info is None and not create:
                    os.close(fd)
                    return None
                if info is not None and not stat.S_ISDIR(info.st_mode):
                    raise FolderError(f"{where} is {_kind(info)}, where a folder belongs") from None
                raise FolderError(f"cannot open {where}: {failure.strerror or failure}") from None
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def _inside(root: Path, folders: tuple[str, ...], create: bool = False) -> Iterator[int | None]:
    """A descriptor of the folder `root/folders...`, reached one real folder at a time (a symbolic link or a file
    on the way is refused, whatever it points to); missing folders are created with `create`, else None is given.
    `root` itself is the user's choice and may be a link."""
    fd = _open_inside(root, folders, create)
    try:
        yield fd
    finally:
        if fd is not None:
            os.close(fd)


def entry_inside(root: Path, relative: str | Path) -> os.stat_result | None:
    """What is at `root/relative` (a link as the link itself), or None where nothing is; the folders on the way
    must be real folders."""
    *folders, name = _parts(relative)
    with _inside(root, tuple(folders)) as fd:
        if fd is None:
            return None
        try:
            return os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as failure:
            raise FolderError(f"cannot look at {shown_path(root / relative)}: {failure.strerror or failure}") from None


def check_folder_inside(root: Path, relative: str | Path) -> None:
    """`root/relative` is a real folder or can be made one: every part of it that exists is a folder, not a link."""
    with _inside(root, _parts(relative)):
        pass


def check_file_inside(root: Path, relative: str | Path) -> None:
    """A file can be written at `root/relative`: the folders on the way are real folders or missing, and no folder
    holds its name (a link there is replaced when the file is written, never followed)."""
    *folders, _ = _parts(relative)
    if folders:
        check_folder_inside(root, Path(*folders))
    found = entry_inside(root, relative)
    if found is not None and stat.S_ISDIR(found.st_mode):
        raise FolderError(f"cannot write {shown_path(root / relative)}: a folder is in the way")


def list_inside(root: Path, relative: str | Path) -> list[tuple[str, os.stat_result]]:
    """The entries of the real folder `root/relative` (each as itself, a link as a link), sorted by name; none where
    the folder does not exist."""
    with _inside(root, _parts(relative)) as fd:
        if fd is None:
            return []
        try:
            with os.scandir(fd) as entries:
                names = sorted(entry.name for entry in entries)
            return [(name, os.stat(name, dir_fd=fd, follow_symlinks=False)) for name in names]
        except OSError as failure:
            raise FolderError(f"cannot list {shown_path(root / relative)}: {failure.strerror or failure}") from None


def read_inside(root: Path, relative: str | Path, limit: int, what: str) -> bytes:
    """The bytes of the regular file `root/relative`, at most `limit` of them, reached without following a link;
    a link, a folder, a pipe or a device there is refused before it is opened (opening a pipe could block, a
    device could be endless)."""
    *folders, name = _parts(relative)
    shown = shown_path(root / relative)
    with _inside(root, tuple(folders)) as fd:
        if fd is None:
            raise FolderError(f"{what} {shown} does not exist")
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if not stat.S_ISREG(info.st_mode):
                raise FolderError(f"{what} {shown} is {_kind(info)}, not a regular file")
            if info.st_size > limit:
                raise FolderError(f"{what} {shown} is larger than {limit} bytes, the limit for a {what}")
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
            with os.fdopen(os.open(name, flags, dir_fd=fd), "rb") as file:
                if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):  # swapped since it was looked at
                    raise FolderError(f"{what} {shown} is not a regular file")
                data = file.read(limit + 1)
        except FileNotFoundError:
            raise FolderError(f"{what} {shown} does not exist") from None
        except OSError as failure:
            raise FolderError(f"cannot read {what} {shown}: {failure.strerror or failure}") from None
    if len(data) > limit:
        raise FolderError(f"{what} {shown} is larger than {limit} bytes, the limit for a {what}")
    return data


def parse_json(data: bytes | str, where: str, error: type[Exception] = FolderError) -> object:
    """JSON with only finite numbers, no key twice in one object and at most MAX_JSON_CONTAINERS lists and objects
    (counted in the text before parsing, so a file of nested brackets costs a count); `where` starts the message."""
    square, curly = ("[", "{") if isinstance(data, str) else (b"[", b"{")
    if data.count(square) + data.count(curly) > MAX_JSON_CONTAINERS:
        raise error(f"{where}: more than {MAX_JSON_CONTAINERS} lists and objects")

    def finite(text: str) -> float:
        if not math.isfinite(value := float(text)):
            raise error(f"{where}: {brief(text)} is not a finite number")
        return value

    def refuse(text: str) -> float:
        raise error(f"{where}: {text} is not a finite number")

    def members(pairs: list) -> dict:
        found = dict(pairs)
        if len(found) < len(pairs):
            raise error(f"{where}: a key appears twice in one object")
        return found

    try:
        return json.loads(data, parse_float=finite, parse_constant=refuse, object_pairs_hook=members)
    except (ValueError, RecursionError) as failure:  # UnicodeDecodeError and too long an integer included
        if isinstance(failure, error):
            raise
        raise error(f"{where}: not valid JSON ({brief(str(failure), 120)})") from None


def read_json_inside(root: Path, relative: str | Path, limit: int, what: str) -> object:
    """`read_inside`, parsed by `parse_json`."""
    return parse_json(read_inside(root, relative, limit, what), f"{what} {shown_path(root / relative)}")


def write_inside(root: Path, relative: str | Path, data: bytes, exclusive: bool = False) -> bool:
    """Write `data` whole at `root/relative`: under a temporary name in the same folder, then moved into place
    (a link there is replaced, never written through); missing folders are created, a link where a folder
    belongs is refused. With `exclusive`, nothing is replaced: False where a file is already there."""
    *folders, name = _parts(relative)
    shown = shown_path(root / relative)
    with _inside(root, tuple(folders), create=True) as fd:
        partial = f".{name}.{os.getpid()}.{secrets.token_hex(4)}.partial"
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
            with os.fdopen(os.open(partial, flags, 0o666, dir_fd=fd), "wb") as file:
                file.write(data)
            if exclusive:
                try:
                    os.link(partial, name, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False)
                except FileExistsError:
                    return False
                return True
            os.replace(partial, name, src_dir_fd=fd, dst_dir_fd=fd)
            return True
        except IsADirectoryError:
            raise FolderError(f"cannot write {shown}: a folder is in the way") from None
        except OSError as failure:
            raise FolderError(f"cannot write {shown}: {failure.strerror or failure}") from None
        finally:
            with suppress(OSError):  # gone once moved into place
                os.unlink(partial, dir_fd=fd)


def remove_inside(root: Path, relative: str | Path) -> None:
    """Remove the file (or link) at `root/relative` where there is one; a folder there is refused."""
    *folders, name = _parts(relative)
    with _inside(root, tuple(folders)) as fd:
        if fd is None:
            return
        try:
            os.unlink(name, dir_fd=fd)
        except FileNotFoundError:
            pass
        except OSError as failure:  # a folder: EISDIR, or EPERM on some systems
            raise FolderError(f"cannot remove {shown_path(root / relative)}: {failure.strerror or failure}") from None
