"""The vectorised fast path of the LIBSVM reader: numpy over raw bytes (SWAR on eight bytes per
word, exact float arithmetic), kept apart from the format's rules and messages in
:mod:`kcheck.io.data`.

:func:`fast_chunk` accepts only input it can prove well formed and returns None otherwise, so the
reference parser decides every doubtful chunk. Numbers equal Python's ``float()``: a decimal
mantissa of at most 15 digits with exponent |k| <= 22 takes one correctly rounded multiplication or
division; anything else goes through CPython's ``strtod`` (``np.fromstring``). :class:`CsrBuilder`
gathers rows into CSR without two copies."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

__all__ = ["MAX_INDEX", "CsrBuilder", "Part", "TooLarge", "fast_chunk", "keep_scratch_memory"]

Array = npt.NDArray[Any]

#: A LIBSVM index must fit a C int.
MAX_INDEX = 2**31 - 1
# Index arrays are int32 when everything fits.
_INT32_MAX = 2**31 - 1
#: CSR bytes of one stored value: float64 value and int32 index.
_BYTES_PER_VALUE = 12

_PAD_FRONT = 16  # room for 8-byte loads that end at the first token
_PAD_BACK = 40  # room for 16-byte loads that start at the last token


class Part(NamedTuple):
    """What one chunk of lines holds: one entry per data row, one per stored value."""

    labels: Array  # float64, one per row
    counts: Array  # int64, values per row
    cols: Array  # int64, 0-based column of each value, sorted within each row
    vals: Array  # float64
    nlines: int  # newline characters in the chunk (to number the next chunk's lines)


class TooLarge(Exception):
    """The values read so far outgrew the CSR byte cap; the caller knows the line."""


# ----------------------------------------------------------------------------------------------
# SWAR helpers: eight bytes per uint64, little-endian, byte 0 = first character.

_u64 = np.uint64


def _rep(b: int) -> np.uint64:
    rep: np.uint64 = _u64(b * 0x0101010101010101)
    return rep


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
    out: Array = (((x & _M1) * _MUL1) + (((x >> _S16) & _M1) * _MUL2)) >> _S32
    return out


def _pos1(mask: Array) -> Array:
    """1-based position of each word's only marked byte, 0 if none (x 0x0102030405060708)."""
    out: Array = (((mask >> _S7) * _POSMUL) >> _S56).astype(np.intp)
    return out


def _at_most_one(a: Array) -> Array:
    out: Array = (a & (a - _ONE)) == 0
    return out


def _window(v16: Array, s: Array, n: Array) -> tuple[Array, Array, Array, Array, Array, Array]:
    """Load 16 bytes per token and classify them (only LIBSVM characters): low and high words as
    digit values (0 outside digits), in-token non-digit masks, and token bytes XOR '0'."""
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


# Token XOR '0': '.' (0x1E) has bit 0 clear; '+' (0x1B) and '-' (0x1D) bit 0 set, bit 6 clear,
# differing in bit 1; 'e'/'E' (0x55/0x75) bits 0 and 6 set.


def _mantissa(dvl: Array, dvh: Array, dpe: Array) -> Array:
    """A window's digits as one number with the decimal point's gap closed (digits before byte dpe
    move up one); at most 15 digits, so below 10**15 and exact in a float."""
    il = dvl & _KL[dpe]
    ih = dvh & _KH[dpe]
    ml = (dvl ^ il) | (il << _S8)
    mh = (dvh ^ ih) | (ih << _S8) | (il >> _S56)
    out: Array = (_swar8(ml) * _E8 + _swar8(mh)).astype(np.float64)
    return out


def _dot_position(dotl: Array, doth: Array, default: Array) -> tuple[Array, Array, Array]:
    """(ok, hasdot, position) of the single marked byte in a window; default where none."""
    ok = _at_most_one(dotl) & _at_most_one(doth) & ((dotl == 0) | (doth == 0))
    pl = _pos1(dotl)
    ph = _pos1(doth)
    pos = np.where(pl > 0, pl - 1, np.where(ph > 0, ph + 7, default))
    return ok, (pl | ph) != 0, np.minimum(pos, 16)  # several marks (not ok) sum past 16


def _numbers_plain(v16: Array, s: Array, n: Array) -> tuple[Array, Array]:
    """Parse ``[+-]digits[.digits]`` tokens (up to 16 bytes, 15 digits) exactly: (values, ok).
    Mantissa divided by one exact power of ten: a single rounding, as float()."""
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
    """As _numbers_plain, with ``[eE][+-]digits``: times or over one exact power of ten."""
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
    """Parse tokens c[s:e] exactly, or None if one is not a finite number; n_e (the chunk's 'e'/'E'
    count) picks the cheaper path, and leftovers go to strtod."""
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
    """Blank out 'qid:N' tokens in place; False if a 'q' token is not one or is the label."""
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


def fast_chunk(text: bytes, zero_based: bool) -> Part | None:  # noqa: C901 - hostile data, one pass
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
    if idx is None or (len(idx) and int(idx.max()) > MAX_INDEX):
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
    return Part(labels, counts.astype(np.int64), idx, vals, nlines)


_allocator_ready = False


def keep_scratch_memory() -> None:
    """Stop glibc from returning chunk scratch memory to the OS after every chunk: each chunk's
    numpy temporaries were faulted in again, a third of the read time. Freeing one large mmap-ed
    block raises glibc's dynamic mmap and trim thresholds (mallopt(3)); other allocators ignore
    it."""
    global _allocator_ready
    if not _allocator_ready:
        _allocator_ready = True
        np.empty(1 << 24, np.uint8)  # 16 MB, below glibc's 32 MB cap for the adjustment


class CsrBuilder:
    """Collects the chunks' rows into CSR arrays grown by realloc. Values past ``n_features`` are
    dropped and counted in ``dropped``; past ``max_bytes`` raises :class:`TooLarge` (the caller
    words messages). Unwritten pages cost nothing, so the first capacity is generous; trimmed in
    place at the end (peak: result plus one chunk)."""

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

    def add(self, part: Part) -> None:
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
            raise TooLarge()
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

    @property
    def rows(self) -> int:
        return sum(len(labels) for labels in self.labels)

    def finish(self) -> tuple[np.ndarray, sp.csr_matrix]:
        """The labels and the CSR matrix; the builder's arrays become the matrix's."""
        y = np.concatenate(self.labels) if self.labels else np.empty(0)
        width = self.width if self.n_features is None else self.n_features
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
