"""Read and write LIBSVM-format data files.

The reader is the first thing every command runs, and data sets reach hundreds of megabytes, so
it parses with vectorised numpy operations over the raw bytes instead of a loop per token. The
file is cut into chunks of whole lines. Each chunk takes a fast path that only accepts input it
can prove well formed; a chunk it cannot prove (odd bytes, a malformed token, an index with
leading zeros beyond 16 digits...) is re-read by a plain per-line parser. That parser is the
reference: it either gives the same result or raises :class:`DataFormatError` with the exact
line, so error messages never depend on which path ran.

Numbers are parsed to exactly the value Python's ``float()`` gives: the vectorised path only
handles tokens whose decimal mantissa fits in 15 digits with a decimal exponent of at most 22,
where one correctly rounded multiplication or division gives the exact answer; everything else
goes through CPython's own correctly rounded ``strtod`` (via ``np.fromstring``).

Explicit zero values (including ``-0.0``) are kept as stored entries, as LIBSVM and scikit-learn
keep them; the writer omits zeros, so a written file reads back with no explicit zeros.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import hashlib
import io
import lzma
import math
import os
import re
import sys
import warnings
import zlib
from collections.abc import Iterator
from typing import Any, BinaryIO, NamedTuple

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from kcheck.atomic import atomic_open
from kcheck.errors import DataFormatError, KcheckError, KcheckWarning
from kcheck.memory import line_too_long, max_line_bytes

__all__ = ["read_libsvm", "write_libsvm", "label_repr", "content_sha256"]

PathArg = str | os.PathLike[str]
Array = npt.NDArray[Any]

# Indices are stored as int32 when they fit; a LIBSVM index must fit a C int.
_MAX_INDEX = 2**31 - 1
_INT32_MAX = 2**31 - 1

_CHUNK = 1 << 18  # bytes per chunk: big enough to amortise numpy call overhead, small for cache
_PAD_FRONT = 16  # room for 8-byte loads that end at the first token
_PAD_BACK = 40  # room for 16-byte loads that start at the last token

_BOM = b"\xef\xbb\xbf"
_GZIP_MAGIC = b"\x1f\x8b"
_BZ2_MAGIC = b"BZh"
_XZ_MAGIC = b"\xfd7zXZ\x00"


class _Part(NamedTuple):
    """What one chunk of lines holds: one entry per data row, one per stored value."""

    labels: Array  # float64, one per row
    counts: Array  # int64, values per row
    cols: Array  # int64, 0-based column of each value, sorted within each row
    vals: Array  # float64
    nlines: int  # newline characters in the chunk (to number the next chunk's lines)


# ----------------------------------------------------------------------------------------------
# Input


def _display_name(path: PathArg) -> str:
    return "<stdin>" if _is_stdin(path) else os.fspath(path)


def _is_stdin(path: PathArg) -> bool:
    return isinstance(path, str) and path == "-"


_CODEC_ERRORS = (EOFError, OSError, ValueError, lzma.LZMAError, zlib.error)


def _read_stdin(name: str, max_line: int) -> bytes:
    """All of standard input, refused as soon as one line outgrows ``max_line``."""
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:
        return sys.stdin.read().encode("utf-8")
    blocks: list[bytes] = []
    lines = tail = 0
    while block := stream.read(_CHUNK):
        blocks.append(block)
        newlines = block.count(b"\n")
        tail = len(block) - block.rfind(b"\n") - 1 if newlines else tail + len(block)
        lines += newlines
        if tail > max_line:
            raise line_too_long(name, lines + 1, max_line)
    return b"".join(blocks)


def _open(
    path: PathArg, name: str, stack: contextlib.ExitStack, max_line: int
) -> tuple[BinaryIO, int]:
    """A binary stream of the decompressed bytes and a size hint for the output arrays.

    Compression is recognised by magic bytes, so a misnamed file still reads. Standard input
    is read whole first, as it cannot be peeked at. Opened files are closed by ``stack``.
    """
    raw: BinaryIO
    try:
        if _is_stdin(path):
            data = _read_stdin(name, max_line)
            raw = io.BytesIO(data)
            size = len(data)
            head = data[:6]
        else:
            reader = stack.enter_context(open(path, "rb"))
            size = os.fstat(reader.fileno()).st_size
            head = reader.peek(6)[:6]
            raw = reader
    except OSError as e:
        raise DataFormatError(name, None, f"cannot read the file: {e.strerror or e}") from None
    codec: Any = None
    if head.startswith(_GZIP_MAGIC):
        codec = gzip.GzipFile(fileobj=raw, mode="rb")
    elif head.startswith(_XZ_MAGIC):
        codec = lzma.LZMAFile(raw, mode="rb")
    elif head.startswith(_BZ2_MAGIC):
        codec = bz2.BZ2File(raw, mode="rb")
    if codec is None:
        return raw, size
    return stack.enter_context(codec), 4 * size


def _codec_name(f: BinaryIO) -> str:
    if isinstance(f, gzip.GzipFile):
        return "gzip"
    if isinstance(f, lzma.LZMAFile):
        return "xz"
    if isinstance(f, bz2.BZ2File):
        return "bzip2"
    return "the"


class _LineTooLong(Exception):
    """A line outgrew the cap; the caller knows its number."""


class _TooLarge(Exception):
    """The values read so far outgrew ``max_csr_bytes``; the caller knows the line."""


#: CSR bytes of one stored value: float64 value and int32 index.
_BYTES_PER_VALUE = 12


def _line_chunks(
    f: BinaryIO, name: str, max_line: int, digest: Any = None
) -> Iterator[bytes]:
    """Successive pieces of about _CHUNK bytes, each ending at a line end (except the last).

    Streaming keeps memory at the size of the result, not of the file. A UTF-8 BOM is
    dropped; a file whose first block has lone CR line ends (classic Mac OS) gets LF ones.
    A line longer than ``max_line`` raises _LineTooLong (``/dev/zero`` has no line end).
    ``digest`` (a hashlib object) is fed every block as read, before any of that.
    """
    pending: list[bytes] = []
    pending_bytes = 0
    first = True
    cr_only = False
    while True:
        try:
            block = f.read(_CHUNK)
        except _CODEC_ERRORS as e:
            raise DataFormatError(
                name, None, f"{_codec_name(f)} data is truncated or corrupt ({e})"
            ) from None
        if digest is not None:
            digest.update(block)
        if first:
            first = False
            if block.startswith(_BOM):
                block = block[len(_BOM) :]
            cr_only = b"\r" in block and b"\n" not in block
        if cr_only:
            block = block.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if not block:
            if pending:
                yield b"".join(pending)
            return
        cut = block.rfind(b"\n") + 1
        if cut == 0:
            pending.append(block)
            pending_bytes += len(block)
            if pending_bytes > max_line:
                raise _LineTooLong()
            continue
        if pending:
            pending.append(block[:cut])
            yield b"".join(pending)
            pending = []
        else:
            yield block[:cut] if cut < len(block) else block
        pending_bytes = len(block) - cut
        if cut < len(block):
            pending.append(block[cut:])


def _check_stream(f: BinaryIO, name: str) -> None:
    """Read a compressed stream to its end; a codec failure becomes DataFormatError.

    A damaged archive can decode to plausible text before its checksum fails, so when the
    text is rejected the rest is checked first: "corrupt" is the better message then.
    """
    if not isinstance(f, (gzip.GzipFile, lzma.LZMAFile, bz2.BZ2File)):
        return
    try:
        while f.read(_CHUNK):
            pass
    except _CODEC_ERRORS as e:
        raise DataFormatError(
            name, None, f"{_codec_name(f)} data is truncated or corrupt ({e})"
        ) from None


# ----------------------------------------------------------------------------------------------
# SWAR helpers: eight bytes per uint64, little-endian, byte 0 = first character.

_u64 = np.uint64


def _rep(b: int) -> np.uint64:
    return _u64(b * 0x0101010101010101)


_FULL = (1 << 64) - 1
_H = _rep(0x80)  # the high bit of every byte: where the per-byte tests leave their answer
_Z30 = _rep(0x30)  # '0': a digit XOR '0' is its value 0-9
_X76 = _rep(0x76)  # t + 0x76 sets the high bit exactly when byte t (<= 0x7F) is >= 10
_ONE = _u64(1)
_POSMUL = _u64(0x0102030405060708)
_S1, _S6, _S7, _S8 = _u64(1), _u64(6), _u64(7), _u64(8)
_S16, _S32, _S56, _S63 = _u64(16), _u64(32), _u64(56), _u64(63)
_TEN = _u64(10)
_FF = _u64(0xFF)
_E8 = _u64(10**8)
_B0 = _u64(0x80)
_M1 = _u64(0x000000FF000000FF)
_MUL1 = _u64(100 + (1000000 << 32))
_MUL2 = _u64(1 + (10000 << 32))


def _low_bytes(k: int) -> int:
    k = min(max(k, 0), 8)
    return _FULL if k == 8 else (1 << (8 * k)) - 1


# _KL[p] / _KH[p]: the bytes [0, p) of a 16-byte window, in its low and high word.
_KL = np.array([_low_bytes(p) for p in range(20)], dtype=np.uint64)
_KH = np.array([_low_bytes(p - 8) for p in range(20)], dtype=np.uint64)
# _KTOP[k]: the last k bytes of a word; _ZFILL[k]: '0' characters in the other bytes.
_KTOP = np.array([_FULL ^ _low_bytes(8 - k) for k in range(9)], dtype=np.uint64)
_ZFILL = np.array([_low_bytes(8 - k) & 0x3030303030303030 for k in range(9)], dtype=np.uint64)
# Exact powers of ten: 10**k is exactly representable for k <= 22.
_P10 = np.array([float(10**k) for k in range(23)])


def _swar8(x: Array) -> Array:
    """Eight digit values (0-9, first byte most significant) per word -> their integer."""
    x = x * _TEN + (x >> _S8)
    return (((x & _M1) * _MUL1) + (((x >> _S16) & _M1) * _MUL2)) >> _S32


def _pos1(mask: Array) -> Array:
    """1-based byte position of the only marked byte of each word, 0 if none.

    A mark in byte k times 0x0102030405060708 puts k + 1 into the top byte.
    """
    return (((mask >> _S7) * _POSMUL) >> _S56).astype(np.intp)


def _at_most_one(a: Array) -> Array:
    return (a & (a - _ONE)) == 0


def _window(v16: Array, s: Array, n: Array) -> tuple[Array, Array, Array, Array, Array, Array]:
    """Load 16 bytes per token and classify them (the chunk holds only LIBSVM characters).

    Returns the low and high words as digit values (0 outside digits), the masks of in-token
    non-digit bytes, and the token bytes XOR '0' (whose bits tell the non-digits apart).
    """
    nn = np.minimum(n, 16)
    w = v16[s].view("<u8")
    kl = _KL[nn]
    kh = _KH[nn]
    tl = (w[0::2] & kl) ^ _Z30
    th = (w[1::2] & kh) ^ _Z30
    ndl = (tl + _X76) & _H  # bytes that are not digits, also past the token
    ndh = (th + _X76) & _H
    dvl = tl & ~((ndl >> _S7) * _FF)
    dvh = th & ~((ndh >> _S7) * _FF)
    return dvl, dvh, ndl & kl, ndh & kh, tl, th


# In a token XOR '0', the non-digits differ in three bits: '.' 0x1E has bit 0 clear; '+' 0x1B
# and '-' 0x1D have bit 0 set and bit 6 clear, and differ in bit 1; 'e' 0x55 and 'E' 0x75 have
# bits 0 and 6 set. Shifting the bit to position 7 and masking with the non-digit marks picks
# each class out of eight bytes at once.


def _mantissa(dvl: Array, dvh: Array, dpe: Array) -> Array:
    """The digits of a window read as one number after closing the gap of the decimal point.

    The digits before byte dpe move up one byte, so with the point (or nothing) at dpe the
    digits stand in consecutive places; the window's 16 places hold at most 15 digits, so the
    value is below 10**15 and exact in a float.
    """
    il = dvl & _KL[dpe]
    ih = dvh & _KH[dpe]
    ml = (dvl ^ il) | (il << _S8)
    mh = (dvh ^ ih) | (ih << _S8) | (il >> _S56)
    return (_swar8(ml) * _E8 + _swar8(mh)).astype(np.float64)


def _dot_position(dotl: Array, doth: Array, default: Array) -> tuple[Array, Array, Array]:
    """(ok, hasdot, position) of the single marked byte in a window; default where none."""
    ok = _at_most_one(dotl) & _at_most_one(doth) & ((dotl == 0) | (doth == 0))
    pl = _pos1(dotl)
    ph = _pos1(doth)
    pos = np.where(pl > 0, pl - 1, np.where(ph > 0, ph + 7, default))
    return ok, (pl | ph) != 0, np.minimum(pos, 16)  # several marks (not ok) sum past 16


def _numbers_plain(v16: Array, s: Array, n: Array) -> tuple[Array, Array]:
    """Parse ``[+-]digits[.digits]`` tokens (up to 16 bytes, 15 digits) exactly.

    Returns (values, ok); ok is False where the token is not of that form. The value is the
    mantissa integer divided by one exact power of ten: a single rounding, as float() does.
    """
    dvl, dvh, ndl, ndh, tl, th = _window(v16, s, n)
    odd_l = tl << _S7
    sg0 = ndl & odd_l & ~(tl << _S1) & _B0  # a sign (not a point or an 'e') in byte 0
    dotl = ndl ^ sg0
    doth = ndh
    ok = n <= 16
    ok &= ((dotl & odd_l) | (doth & (th << _S7))) == 0  # all other non-digits are points
    ok2, hasdot, dpe = _dot_position(dotl, doth, np.minimum(n, 16))
    ok &= ok2
    ok &= hasdot | (n < 16)  # a 16-digit integer does not fit the 15 places
    ok &= n - (sg0 != 0) - hasdot >= 1  # at least one digit
    val = _mantissa(dvl, dvh, dpe) / _P10[15 - dpe]
    val.view(np.uint64)[...] |= (sg0 & ~(tl << _S6)) << _S56  # '-' sets the sign bit
    return val, ok


def _numbers_exp(v16: Array, s: Array, n: Array) -> tuple[Array, Array]:
    """Like _numbers_plain, also accepting an exponent ``[eE][+-]digits``.

    The value is the mantissa integer times or divided by one exact power of ten (|k| <= 22).
    """
    nn = np.minimum(n, 16)
    dvl, dvh, ndl, ndh, tl, th = _window(v16, s, n)
    odd_l = tl << _S7
    odd_h = th << _S7
    b6l = tl << _S1
    b6h = th << _S1
    eel = ndl & b6l
    eeh = ndh & b6h
    sgl = ndl & odd_l & ~b6l
    sgh = ndh & odd_h & ~b6h
    dotl = ndl & ~odd_l
    doth = ndh & ~odd_h
    ok = n <= 16
    ok2, hase, ep = _dot_position(eel, eeh, nn)
    ok &= ok2
    ok2, hasdot, dp = _dot_position(dotl, doth, ep)
    ok &= ok2
    ok &= dp <= ep
    sa = ep + 1  # a sign may stand in byte 0 and right after the 'e'
    esl = sgl & ~_KL[sa] & _KL[sa + 1]
    esh = sgh & ~_KH[sa] & _KH[sa + 1]
    sg0 = sgl & _B0
    ok &= ((sgl ^ esl ^ sg0) | (sgh ^ esh)) == 0
    esg = (esl | esh) != 0
    nde = nn - ep - 1 - esg
    ok &= ~hase | ((nde >= 1) & (nde <= 4))
    ok &= (hasdot | hase) | (n < 16)
    last = ep - hasdot  # byte of the last mantissa digit once the gap is closed
    ok &= last - (sg0 != 0) >= 1
    ev = (_swar8(dvl & ~_KL[sa]) * _E8 + _swar8(dvh & ~_KH[sa])).astype(np.float64)
    ev /= _P10[16 - nn]  # exact: the exponent digits end the window
    eneg = ((esl & ~b6l & ~(tl << _S6)) | (esh & ~(th << _S6))) != 0
    k = np.where(eneg, -ev, ev).astype(np.intp) - (ep - 1 - dp) * hasdot
    ok &= (k >= -22) & (k <= 22)
    kc = np.clip(k, -22, 22)
    big = _mantissa(dvl & _KL[ep], dvh & _KH[ep], np.where(hasdot, dp, ep))
    big /= _P10[15 - last]  # exact: only drops empty places after the last digit
    val = (big * _P10[np.maximum(kc, 0)]) / _P10[np.maximum(-kc, 0)]  # one factor is 1
    val.view(np.uint64)[...] |= (sg0 & ~(tl << _S6)) << _S56
    return val, ok


def _labels_int(words: Array, c: Array, s: Array, e: Array) -> tuple[Array, Array]:
    """Parse ``[+-]digits`` tokens of up to 8 digits (the usual labels) exactly."""
    first = c[s]
    sg = ((first == 0x2B) | (first == 0x2D)).astype(np.intp)
    k = e - s - sg
    ok = (k >= 1) & (k <= 8)
    k = np.clip(k, 0, 8)
    tw = ((words[e - 8] & _KTOP[k]) | _ZFILL[k]) ^ _Z30
    ok &= ((tw + _X76) & _H) == 0
    val = _swar8(tw).astype(np.float64)
    val.view(np.uint64)[...] |= (first == 0x2D).astype(np.uint64) << _S63
    return val, ok


def _numbers_text(c: Array, s: Array, e: Array) -> Array | None:
    """Parse tokens c[s:e] with CPython's correctly rounded strtod; None if any is malformed."""
    if len(s) == 0:
        return np.empty(0)
    n = e - s + 1  # each token plus the whitespace byte after it
    offs = np.cumsum(n) - n
    idx = np.repeat(s - offs, n) + np.arange(int(offs[-1] + n[-1]))
    text = c[idx].tobytes()
    try:
        v = np.fromstring(text, dtype=np.float64, sep=" ")
    except ValueError:
        return None
    # A token that is not exactly one number either fails or changes the count.
    if len(v) != len(s) or not np.isfinite(v).all():
        return None
    return v


def _numbers(c: Array, v16: Array, s: Array, e: Array, n_e: int) -> Array | None:
    """Parse tokens c[s:e] exactly, or None if one is not a finite number.

    n_e, the chunk's count of 'e'/'E', picks the cheaper fast path; tokens it cannot take go to
    the next path and finally to strtod.
    """
    if n_e * 4 > len(s):
        vals, ok = _numbers_exp(v16, s, e - s)
    else:
        vals, ok = _numbers_plain(v16, s, e - s)
        if n_e and not ok.all():
            redo = np.flatnonzero(~ok)
            vals[redo], ok[redo] = _numbers_exp(v16, s[redo], e[redo] - s[redo])
    if not ok.all():
        bad = np.flatnonzero(~ok)
        slow = _numbers_text(c, s[bad], e[bad])
        if slow is None:
            return None
        vals[bad] = slow
    return vals


def _indices(words: Array, col: Array, li: Array) -> Array | None:
    """The decimal integers that end at each colon, or None if one is not all digits."""
    if len(col) == 0:
        return np.empty(0, np.int64)
    if int(li.max()) > 16:
        return None
    k = np.minimum(li, 8)
    w = (words[col - 8] & _KTOP[k]) | _ZFILL[k]
    t = w ^ _Z30
    bad = (t + _X76) & _H
    val = _swar8(t)
    if int(li.max()) > 8:
        long = np.flatnonzero(li > 8)
        k2 = li[long] - 8
        w2 = (words[col[long] - 16] & _KTOP[k2]) | _ZFILL[k2]
        t2 = w2 ^ _Z30
        bad[long] |= (t2 + _X76) & _H
        val[long] += _swar8(t2) * _E8
    if bad.any():
        return None
    return val.astype(np.int64)


# ----------------------------------------------------------------------------------------------
# Fast path for one chunk


def _blank_comments(c: Array, nl: Array) -> None:
    """Overwrite every '#' comment (up to its newline) with spaces, in place."""
    hp = np.flatnonzero(c == 0x23)
    if len(hp) == 0:
        return
    line = np.searchsorted(nl, hp)
    first = np.ones(len(hp), bool)
    first[1:] = line[1:] != line[:-1]
    delta = np.zeros(len(c) + 1, np.int8)
    delta[hp[first]] = 1
    delta[nl[line[first]]] = -1
    inside = np.cumsum(delta[:-1], dtype=np.int8).view(bool)
    c[inside] = 0x20


def _tokens(c: Array) -> tuple[Array, Array]:
    """Start and end offsets of the whitespace-separated tokens (c starts and ends blank)."""
    sep = c <= 0x20
    edges = (sep[1:] != sep[:-1]).nonzero()[0]
    edges += 1
    return edges[0::2], edges[1::2]


def _only_libsvm_bytes(c: Array) -> bool:
    """True if c holds nothing but whitespace, digits and the characters ':.+-eE'."""
    d = c - 0x30
    ok = (c <= 0x20) | (d <= 10) | ((c | 0x20) == 0x65) | ((d >= 0xFB) & (d != 0xFC) & (d != 0xFF))
    return bool(ok.all())


def _drop_qids(c: Array, nl: Array, starts: Array, ends: Array) -> bool:
    """Blank out 'qid:N' tokens in place; False if a token starting with 'q' is not one, or
    stands where the label should be."""
    q = np.flatnonzero(c[starts] == ord("q"))
    if len(q) == 0:
        return True
    if q[0] == 0:
        return False
    qs, qe = starts[q], ends[q]
    if np.any(np.searchsorted(nl, ends[q - 1]) != np.searchsorted(nl, qs)):
        return False  # first token of its line
    if int((qe - qs).min()) < 5:
        return False
    for i, ch in enumerate(b"qid:"):
        if not (c[qs + i] == ch).all():
            return False
    for k in range(4, int((qe - qs).max())):
        inside = qs + k < qe
        d = c[qs[inside] + k]
        if not ((d >= 0x30) & (d <= 0x39)).all():
            return False
    for k in range(int((qe - qs).max())):
        inside = qs + k < qe
        c[qs[inside] + k] = 0x20
    return True


def _fast_chunk(text: bytes, zero_based: bool) -> _Part | None:
    """Parse text (whole lines) or return None if it needs the careful parser."""
    size = len(text)
    ends_nl = text[-1] == 0x0A
    ba = bytearray(b" ") * (_PAD_FRONT + size + 1 + _PAD_BACK)
    ba[_PAD_FRONT : _PAD_FRONT + size] = text
    if not ends_nl:
        ba[_PAD_FRONT + size] = 0x0A
    c = np.frombuffer(ba, np.uint8)
    nl = np.flatnonzero(c == 0x0A)
    if int(np.count_nonzero(c < 0x20)) != len(nl):
        # Tabs, CR, VT, FF are whitespace; any other control byte means binary data.
        if np.any((c < 0x09) | ((c > 0x0D) & (c < 0x20))):
            return None
    if int(c.max()) >= 0x7F:
        return None
    _blank_comments(c, nl)

    starts, ends = _tokens(c)
    if np.any(c == ord("q")):
        if not _drop_qids(c, nl, starts, ends):
            return None
        starts, ends = _tokens(c)
    if not _only_libsvm_bytes(c):
        return None

    line_start = np.empty(len(nl), np.intp)
    line_start[0] = 0
    line_start[1:] = nl[:-1] + 1
    first = np.searchsorted(starts, line_start)
    ntok = np.diff(first, append=len(starts))
    lab = first[ntok > 0]
    counts = ntok[ntok > 0] - 1
    isf = np.ones(len(starts), bool)
    isf[lab] = False
    fs = starts[isf]
    fe = ends[isf]

    # Exactly one colon per feature token, with something on both sides, and none elsewhere.
    col = np.flatnonzero(c == 0x3A)
    if len(col) != len(fs) or not (np.all(col > fs) and np.all(col < fe - 1)):
        return None

    words = np.ndarray((len(ba) - 7,), dtype="<u8", buffer=ba, strides=(1,))
    idx = _indices(words, col, col - fs)
    if idx is None or (len(idx) and int(idx.max()) > _MAX_INDEX):
        return None
    if not zero_based:
        if len(idx) and int(idx.min()) == 0:
            return None
        idx -= 1

    v16 = np.ndarray((len(ba) - 15,), dtype="V16", buffer=ba, strides=(1,))
    n_e = int(np.count_nonzero((c | 0x20) == ord("e")))
    vals = _numbers(c, v16, col + 1, fe, n_e)
    ls, le = starts[lab], ends[lab]
    labels, ok = _labels_int(words, c, ls, le)
    if not ok.all():
        redo = np.flatnonzero(~ok)
        other = _numbers(c, v16, ls[redo], le[redo], n_e)
        if other is None:
            return None
        labels[redo] = other
    if vals is None:
        return None

    nnz = len(idx)
    if nnz > 1:
        step = np.diff(idx)
        bad = step <= 0
        row_end = np.cumsum(counts)[:-1]
        row_end = row_end[(row_end > 0) & (row_end < nnz)]
        bad[row_end - 1] = False
        if bad.any():
            rows = np.repeat(np.arange(len(counts)), counts)
            order = np.lexsort((idx, rows))
            idx = idx[order]
            vals = vals[order]
            if np.any((np.diff(idx) == 0) & (rows[1:] == rows[:-1])):
                return None  # duplicate index: let the careful parser name the line
    nlines = len(nl) - (0 if ends_nl else 1)
    return _Part(labels, counts.astype(np.int64), idx, vals, nlines)


# ----------------------------------------------------------------------------------------------
# Careful per-line parser: the reference semantics and the source of every error message.

_NUMBER = re.compile(rb"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_DIGITS = re.compile(rb"[0-9]+")
_CONTROL = re.compile(rb"[\x00-\x08\x0e-\x1f\x7f]")
_NONFINITE = (b"nan", b"inf", b"infinity")


def _show(tok: bytes) -> str:
    text = tok.decode("utf-8", "backslashreplace")
    if len(text) > 40:
        text = text[:37] + "..."
    return "'" + text + "'"


def _number(tok: bytes, name: str, line: int, what: str) -> float:
    if _NUMBER.fullmatch(tok):
        v = float(tok)
        if math.isinf(v):
            raise DataFormatError(
                name,
                line,
                f"expected a finite {what}, got {_show(tok)}, which overflows to infinity",
            )
        return v
    if tok.lower().lstrip(b"+-") in _NONFINITE:
        raise DataFormatError(
            name, line, f"expected a finite {what}, got {_show(tok)} (NaN and inf are not allowed)"
        )
    raise DataFormatError(name, line, f"expected a numeric {what}, got {_show(tok)}")


def _check_text(line: bytes, name: str, ln: int) -> None:
    bad = _CONTROL.search(line)
    if bad:
        raise DataFormatError(
            name,
            ln,
            f"expected text, got control byte 0x{line[bad.start()]:02x} at column "
            f"{bad.start() + 1} (binary data?)",
        )
    if not line.isascii():
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataFormatError(
                name,
                ln,
                f"expected UTF-8 text, got undecodable byte 0x{line[e.start]:02x} at column "
                f"{e.start + 1} (binary data?)",
            ) from None


def _index(tok: bytes, full: bytes, name: str, ln: int, zero_based: bool) -> int:
    if not _DIGITS.fullmatch(tok):
        if tok[:1] == b"-" and _DIGITS.fullmatch(tok[1:]):
            least = 0 if zero_based else 1
            raise DataFormatError(
                name, ln, f"expected an index >= {least}, got negative index {_show(tok)}"
            )
        if not tok:
            raise DataFormatError(name, ln, f"expected 'index:value', got {_show(full)}")
        raise DataFormatError(name, ln, f"expected an integer index, got {_show(tok)}")
    idx = int(tok)
    if idx > _MAX_INDEX:
        raise DataFormatError(
            name, ln, f"expected an index of at most {_MAX_INDEX}, got {idx} (too large)"
        )
    if zero_based:
        return idx
    if idx == 0:
        raise DataFormatError(
            name,
            ln,
            "expected indices starting at 1, got index 0; "
            "if this file is 0-based, read it with --zero-based",
        )
    return idx - 1


def _slow_chunk(text: bytes, first_line: int, name: str, zero_based: bool) -> _Part:
    """Parse text line by line; raises DataFormatError at the first bad line."""
    lines = text.split(b"\n")
    if text.endswith(b"\n"):
        lines.pop()
    labels: list[float] = []
    counts: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    for i, line in enumerate(lines):
        ln = first_line + i
        _check_text(line, name, ln)
        hash_at = line.find(b"#")
        if hash_at >= 0:
            line = line[:hash_at]
        toks = line.split()
        if not toks:
            continue
        head = toks[0]
        if b"," in head:
            raise DataFormatError(
                name, ln, f"expected one label, got {_show(head)} (multi-label is not supported)"
            )
        if b":" in head:
            raise DataFormatError(name, ln, f"expected a label first, got {_show(head)}")
        label = _number(head, name, ln, "label")
        row: dict[int, float] = {}
        for tok in toks[1:]:
            if tok.startswith(b"qid:"):
                if not _DIGITS.fullmatch(tok[4:]):
                    raise DataFormatError(name, ln, f"expected 'qid:<integer>', got {_show(tok)}")
                continue
            if tok.count(b":") != 1:
                raise DataFormatError(name, ln, f"expected 'index:value', got {_show(tok)}")
            si, sv = tok.split(b":")
            j = _index(si, tok, name, ln, zero_based)
            if not sv:
                raise DataFormatError(name, ln, f"expected 'index:value', got {_show(tok)}")
            if j in row:
                raise DataFormatError(
                    name, ln, f"expected each index once, got index {int(si)} twice"
                )
            row[j] = _number(sv, name, ln, "value")
        labels.append(label)
        counts.append(len(row))
        for j in sorted(row):
            cols.append(j)
            vals.append(row[j])
    return _Part(
        np.array(labels, dtype=np.float64),
        np.array(counts, dtype=np.int64),
        np.array(cols, dtype=np.int64),
        np.array(vals, dtype=np.float64),
        text.count(b"\n"),
    )


# ----------------------------------------------------------------------------------------------
# Public reader


_allocator_ready = False


def _keep_scratch_memory() -> None:
    """Stop glibc from handing chunk scratch memory back to the OS after every chunk.

    Each chunk allocates and frees a few MB of numpy temporaries. glibc trims free memory at
    the top of the heap beyond M_TRIM_THRESHOLD, so every chunk faulted its pages in again,
    which cost a third of the read time. Freeing one large mmap-ed block raises glibc's
    dynamic mmap and trim thresholds (see mallopt(3)); other allocators ignore this.
    """
    global _allocator_ready
    if not _allocator_ready:
        _allocator_ready = True
        np.empty(1 << 24, np.uint8)  # 16 MB, below glibc's 32 MB cap for the adjustment


class _Builder:
    """Collects the chunks' rows into the CSR arrays, growing them by realloc.

    Pages that are never written cost no memory, so the first capacity is generous; the arrays
    are trimmed in place at the end, so the peak is about the result plus one chunk.
    """

    def __init__(
        self, size_hint: int, n_features: int | None, max_bytes: int | None = None
    ) -> None:
        self.max_bytes = max_bytes
        if max_bytes is not None:
            size_hint = min(size_hint, max(max_bytes, 0))
        self.cap = min(max(size_hint // 8, 1024), 1 << 26)
        self.vals = np.empty(self.cap, np.float64)
        self.cols = np.empty(self.cap, np.int32)
        self.labels: list[Array] = []
        self.counts: list[Array] = []
        self.nnz = 0
        self.width = 0
        self.dropped = 0
        self.n_features = n_features

    def add(self, part: _Part) -> None:
        cols, vals, counts = part.cols, part.vals, part.counts
        limit = self.n_features
        if limit is not None and len(cols) and int(cols.max()) >= limit:
            keep = cols < limit
            rows = np.repeat(np.arange(len(counts)), counts)
            counts = counts - np.bincount(rows[~keep], minlength=len(counts))
            self.dropped += len(cols) - int(np.count_nonzero(keep))
            cols, vals = cols[keep], vals[keep]
        k = len(cols)
        if self.max_bytes is not None and (self.nnz + k) * _BYTES_PER_VALUE > self.max_bytes:
            raise _TooLarge()
        if k:
            if self.nnz + k > self.cap:
                self.cap = max(self.nnz + k, self.cap + self.cap // 2)
                self.vals.resize(self.cap, refcheck=False)
                self.cols.resize(self.cap, refcheck=False)
            self.width = max(self.width, int(cols.max()) + 1)
            self.cols[self.nnz : self.nnz + k] = cols
            self.vals[self.nnz : self.nnz + k] = vals
            self.nnz += k
        self.labels.append(part.labels)
        self.counts.append(counts)

    def finish(self, name: str) -> tuple[np.ndarray, sp.csr_matrix]:
        y = np.concatenate(self.labels) if self.labels else np.empty(0)
        if len(y) == 0:
            raise DataFormatError(name, None, "expected data rows, got none (empty file?)")
        width = self.width if self.n_features is None else self.n_features
        if self.dropped:
            warnings.warn(
                f"{name}: dropped {self.dropped} value(s) with an index above "
                f"n_features={self.n_features}",
                KcheckWarning,
                stacklevel=3,
            )
        nnz = self.nnz
        self.vals.resize(nnz, refcheck=False)
        self.cols.resize(nnz, refcheck=False)
        itype = np.int64 if max(nnz, width, len(y)) > _INT32_MAX else np.int32
        indptr = np.zeros(len(y) + 1, dtype=itype)
        np.cumsum(np.concatenate(self.counts), out=indptr[1:])
        cols = self.cols.astype(itype, copy=False)
        X = sp.csr_matrix((self.vals, cols, indptr), shape=(len(y), width))
        X.has_canonical_format = True  # sorted, no duplicates
        return y, X


def read_libsvm(
    path: PathArg,
    *,
    n_features: int | None = None,
    zero_based: bool = False,
    memory_limit: int | None = None,
    digest: Any = None,
    max_csr_bytes: int | None = None,
) -> tuple[np.ndarray, sp.csr_matrix]:
    """Read a LIBSVM/svmlight file into (y, X).

    ``path`` may be plain text, gzip, bzip2 or xz (recognised by their magic bytes), or ``"-"``
    for standard input. Indices are 1-based as in LIBSVM; ``zero_based=True`` reads 0-based
    files (index i goes to column i). ``n_features`` fixes the number of columns: larger indices
    are dropped with a :class:`KcheckWarning`. X is a ``csr_matrix`` (the LIBLINEAR binding
    rejects ``csr_array``) with sorted indices, int32 index arrays when they fit, and float64
    values; y is float64. Any problem with the input raises :class:`DataFormatError`, also a
    line longer than ``memory_limit`` allows (:func:`kcheck.memory.max_line_bytes`).

    ``digest``, a hashlib object such as ``hashlib.sha256()``, is fed the decompressed content
    as it is read, so the content hash costs no second pass over the file (see
    :func:`content_sha256`).

    ``max_csr_bytes`` stops the read with a :class:`KcheckError` as soon as the values read
    need more than that many bytes of CSR, so a file that cannot fit the memory limit is
    refused before it is in memory, not after.
    """
    if n_features is not None and (
        isinstance(n_features, bool)
        or not isinstance(n_features, (int, np.integer))
        or n_features < 0
    ):
        raise ValueError(f"n_features must be a non-negative integer or None, got {n_features!r}")
    name = _display_name(path)
    _keep_scratch_memory()
    max_line = max_line_bytes(memory_limit)
    with contextlib.ExitStack() as stack:
        f, size_hint = _open(path, name, stack, max_line)
        out = _Builder(
            size_hint, None if n_features is None else int(n_features), max_csr_bytes
        )
        line = 1
        try:
            for text in _line_chunks(f, name, max_line, digest):
                part = _fast_chunk(text, zero_based)
                if part is None:
                    part = _slow_chunk(text, line, name, zero_based)
                out.add(part)
                line += part.nlines
        except _LineTooLong:
            raise line_too_long(name, line, max_line) from None
        except _TooLarge:
            assert max_csr_bytes is not None
            if max_csr_bytes <= 0:
                raise KcheckError(
                    f"{name}: the memory limit leaves no room for the data (a check needs "
                    "about 3x the data's size in memory plus 64 MB; see --memory-limit)"
                ) from None
            raise KcheckError(
                f"{name}: by line {line:,} the data already needs more than "
                f"{max_csr_bytes / 2**20:,.1f} MB in memory, more than the memory limit "
                "allows a check (about 3x the data's size plus 64 MB; see --memory-limit)"
            ) from None
        except DataFormatError:
            _check_stream(f, name)  # garbage from a corrupt archive: say that instead
            raise
    return out.finish(name)


def content_sha256(path: PathArg) -> str:
    """SHA-256 of a file's decompressed content: ``a9a`` and ``a9a.xz`` give the same hash.

    It names the data a verdict was made on (``data.sha256``), whatever the file is called or
    how it is compressed. :func:`read_libsvm` computes the same hash while it reads; this
    reads the file for the hash alone (e.g. to tell whether a saved result is still valid).
    Standard input cannot be read twice, so ``"-"`` is refused.
    """
    if _is_stdin(path):
        raise ValueError("the content hash of standard input is known only after reading it")
    name = _display_name(path)
    digest = hashlib.sha256()
    with contextlib.ExitStack() as stack:
        f, _ = _open(path, name, stack, max_line_bytes())  # not stdin: no line cap applies
        while True:
            try:
                block = f.read(1 << 20)
            except _CODEC_ERRORS as e:
                raise DataFormatError(
                    name, None, f"{_codec_name(f)} data is truncated or corrupt ({e})"
                ) from None
            if not block:
                break
            digest.update(block)
    return digest.hexdigest()


# ----------------------------------------------------------------------------------------------
# Writer


def label_repr(v: float) -> str:
    """The text of a label: integral values without '.0' (as LIBSVM tools print them), others
    with 17 significant digits so that they read back exactly."""
    f = float(v)
    if f.is_integer() and abs(f) < 1e16:
        return str(int(f))
    return f"{f:.17g}"


_ROWS_PER_BLOCK = 4096


def _text_blocks(y: Array, X: sp.csr_matrix) -> Iterator[str]:
    """The file's text in blocks of rows, formatted by one %-operation per block for speed."""
    indptr, indices, data = X.indptr, X.indices, X.data
    formats: dict[int, str] = {}
    for r0 in range(0, X.shape[0], _ROWS_PER_BLOCK):
        r1 = min(r0 + _ROWS_PER_BLOCK, X.shape[0])
        p0, p1 = int(indptr[r0]), int(indptr[r1])
        pairs: list[Any] = [None] * (2 * (p1 - p0))
        pairs[0::2] = (indices[p0:p1] + 1).tolist()
        pairs[1::2] = data[p0:p1].tolist()
        fmt: list[str] = []
        args: list[Any] = []
        ptr = indptr[r0 : r1 + 1].tolist()
        for i in range(r1 - r0):
            k = ptr[i + 1] - ptr[i]
            f = formats.get(k)
            if f is None:
                f = formats[k] = "%s" + " %d:%.17g" * k + "\n"
            fmt.append(f)
            args.append(label_repr(y[r0 + i]))
            a = 2 * (ptr[i] - p0)
            args.extend(pairs[a : a + 2 * k])
        yield "".join(fmt) % tuple(args)


def _as_csr(X: Any) -> sp.csr_matrix:
    """A canonical CSR copy of X (never the caller's arrays) with explicit zeros removed."""
    if sp.issparse(X):
        M = sp.csr_matrix(X, dtype=np.float64, copy=True)
    else:
        A = np.asarray(X, dtype=np.float64)
        if A.ndim != 2:
            raise ValueError(f"X must be 2-dimensional, got shape {A.shape}")
        M = sp.csr_matrix(A)
    M.sum_duplicates()
    M.eliminate_zeros()
    M.sort_indices()
    return M


def write_libsvm(path: PathArg, y: np.ndarray, X: Any) -> None:
    """Write (y, X) as a LIBSVM file: 1-based sorted indices, zeros omitted, values with %.17g.

    ``"-"`` writes to standard output. A file is written to a temporary name in the same
    directory and renamed over the target, so readers never see a partial file and a failed
    write leaves any existing file untouched. Raises ValueError for mismatched shapes or
    non-finite values (they could not be read back) and DataFormatError if the file cannot be
    written.
    """
    yv = np.asarray(y, dtype=np.float64).reshape(-1)
    M = _as_csr(X)
    if M.shape[0] != len(yv):
        raise ValueError(f"y has {len(yv)} entries but X has {M.shape[0]} rows")
    if not (np.isfinite(yv).all() and np.isfinite(M.data).all()):
        raise ValueError("cannot write NaN or infinite values in LIBSVM format")

    if _is_stdin(path):
        for block in _text_blocks(yv, M):
            sys.stdout.write(block)
        sys.stdout.flush()
        return
    _write_atomic(os.fspath(path), _text_blocks(yv, M))


def _write_atomic(name: str, blocks: Iterator[str]) -> None:
    with atomic_open(name, "w", "the file", encoding="ascii", newline="\n") as f:
        for block in blocks:
            f.write(block)


