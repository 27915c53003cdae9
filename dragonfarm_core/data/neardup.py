"""Find near-duplicate texts quickly: MinHash blocking, then rapidfuzz to confirm.

Comparing every pair with an edit-distance score is quadratic: 10,000 rows are 50 million
comparisons. Instead each text gets a MinHash signature over its 4-character pieces; texts
that agree on a whole band of the signature become candidates (locality-sensitive hashing), and
only those candidates are scored, in C, with `rapidfuzz.fuzz.ratio` on normalised text (lower
case, punctuation and runs of spaces folded). A pair is reported when that score reaches the
threshold. Blocking can miss a pair whose pieces differ much more than its edit score suggests;
at a threshold of 90 that is rare (under 1% in bench-style tests), the price of linear time.
"""

from __future__ import annotations

import re

import numpy as np
from rapidfuzz import fuzz, process

THRESHOLD = 90.0
BANDS, ROWS_PER_BAND = 12, 4  # 48 hash functions; pairs sharing ~55% of their 4-grams surface
SHINGLE = 4  # characters per shingle
MAX_SHINGLES = 2_000_000  # above this, a consistent sample of shingles keeps the cost linear
BLOCK_CHARS = 1_000_000  # texts are hashed this many characters at a time (memory)
MIN_AGREEMENT = 0.4  # candidates whose signatures agree less than this are not worth scoring
MAX_NEIGHBOURS = 16  # in a huge bucket, compare each text with this many earlier ones only
# At most this many candidate pairs in all (fewer neighbours per band on many texts): texts
# that all look alike (a small vocabulary) otherwise make BANDS * MAX_NEIGHBOURS pairs per
# text, gigabytes of them at 100,000 texts.
MAX_PAIRS = 2_000_000
_MIX = np.uint64(0x9E3779B97F4A7C15)  # odd 64-bit constant for multiplicative hashing
_WORD = re.compile(r"[^\W_]+")


def normalise(text: str) -> str:
    """Lower case, words only, single spaces: 'Hi,  THERE!' -> 'hi there'."""
    return " ".join(_WORD.findall(text.lower()))


def _shingles(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Hashes of every text's 4-character pieces, concatenated, and each text's count.

    All texts are hashed in one vectorised pass over their joined characters; pieces that
    would straddle two texts are cut away by the padding mask.
    """
    pad = "\0" * (SHINGLE - 1)
    codes = np.frombuffer("".join(t + pad for t in texts).encode("utf-32-le"), dtype=np.uint32)
    codes = codes.astype(np.uint64)
    n = len(codes) - SHINGLE + 1
    h = np.zeros(n, dtype=np.uint64)
    for q in range(SHINGLE):
        h = h * _MIX + codes[q : q + n]
    lens = np.array([len(t) for t in texts])
    runs = np.column_stack([lens, np.full(len(texts), SHINGLE - 1)]).ravel()
    inside = np.repeat(np.tile([True, False], len(texts)), runs)[:n]
    return h[inside] * _MIX, lens


def _signatures(texts: list[str]) -> np.ndarray:
    """MinHash signature, one row of BANDS * ROWS_PER_BAND values per non-empty text.

    Texts are hashed BLOCK_CHARS at a time, so the arrays of pieces stay small whatever the
    total; the sample above MAX_SHINGLES keeps one residue class of the whole, as in one pass.
    """
    total = sum(len(t) for t in texts)
    modulus = -(-total // MAX_SHINGLES) if total > MAX_SHINGLES else 1
    rng = np.random.default_rng(0)  # fixed: the same data always gives the same report
    k = BANDS * ROWS_PER_BAND
    mult = rng.integers(1, 2**63, size=k, dtype=np.uint64) | np.uint64(1)
    add = rng.integers(0, 2**63, size=k, dtype=np.uint64)
    sig = np.empty((len(texts), k), dtype=np.uint64)
    start = 0
    for block in _blocks(texts):
        sig[start : start + len(block)] = _block_signatures(block, modulus, mult, add)
        start += len(block)
    return sig


def _blocks(texts: list[str]) -> list[list[str]]:
    """The texts in order, cut into runs of about BLOCK_CHARS characters (one text or more)."""
    blocks: list[list[str]] = [[]]
    size = 0
    for text in texts:
        if blocks[-1] and size + len(text) > BLOCK_CHARS:
            blocks.append([])
            size = 0
        blocks[-1].append(text)
        size += len(text)
    return blocks


def _block_signatures(
    texts: list[str], modulus: int, mult: np.ndarray, add: np.ndarray
) -> np.ndarray:
    with np.errstate(over="ignore"):  # multiplicative hashing relies on uint64 wrap-around
        flat, lens = _shingles(texts)
        if modulus > 1:
            # The same residue class in every text keeps the Jaccard estimate fair; a text
            # left with no piece at all keeps all of its own.
            keep = flat % np.uint64(modulus) == 0
            starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
            lost = np.add.reduceat(keep, starts) == 0
            keep |= np.repeat(lost, lens)
            flat, lens = flat[keep], np.add.reduceat(keep, starts)
        starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
        sig = np.empty((len(texts), len(mult)), dtype=np.uint64)
        for j in range(len(mult)):
            sig[:, j] = np.minimum.reduceat(flat * mult[j] + add[j], starts)
    return sig


def _candidates(sig: np.ndarray) -> np.ndarray:
    """Unique (i, j) index pairs, i < j, that agree on at least one whole band."""
    found = []
    neighbours = min(MAX_NEIGHBOURS, max(1, MAX_PAIRS // (BANDS * max(len(sig), 1))))
    for b in range(BANDS):
        key = np.zeros(len(sig), dtype=np.uint64)
        with np.errstate(over="ignore"):
            for q in range(b * ROWS_PER_BAND, (b + 1) * ROWS_PER_BAND):
                key = key * _MIX ^ sig[:, q]
        order = np.argsort(key, kind="stable")
        sorted_key = key[order]
        for d in range(1, neighbours + 1):
            same = sorted_key[:-d] == sorted_key[d:]
            if not same.any():
                break
            found.append(np.stack([order[:-d][same], order[d:][same]], axis=1))
    if not found:
        return np.empty((0, 2), dtype=np.int64)
    both = np.sort(np.concatenate(found), axis=1)
    codes = np.sort(both[:, 0] * len(sig) + both[:, 1])  # one int per pair: cheap to dedupe
    codes = codes[np.concatenate([[True], codes[1:] != codes[:-1]])]
    pairs = np.column_stack([codes // len(sig), codes % len(sig)])
    # A block of pairs at a time: two rows of signature per pair are 768 bytes.
    agreement = np.concatenate([
        (sig[block[:, 0]] == sig[block[:, 1]]).mean(axis=1)
        for block in np.array_split(pairs, max(1, len(pairs) // 65536))
    ])  # fmt: skip
    return pairs[agreement >= MIN_AGREEMENT]


def near_duplicates(texts: list[str], threshold: float = THRESHOLD) -> list[tuple[int, int, float]]:
    """(earlier, later, score) for each text that nearly repeats an earlier one.

    Exact repeats are left out (count those separately); texts equal after normalisation
    score 100. Each later index appears once, with the earliest match found.

    >>> near_duplicates(["The router drops WiFi every night.", "something else entirely",
    ...                  "The router drops wifi every night!"])
    [(0, 2, 100.0)]
    """
    norm = [normalise(t) for t in texts]
    first_of: dict[str, int] = {}  # normalised text -> first index that has it
    best: dict[int, tuple[int, float]] = {}
    seen_raw: set[str] = set()
    for i, (raw, key) in enumerate(zip(texts, norm, strict=True)):
        if raw in seen_raw:
            continue  # an exact duplicate, reported elsewhere
        seen_raw.add(raw)
        if key in first_of:
            best[i] = (first_of[key], 100.0)
        else:
            first_of[key] = i
    uniq = [k for k in first_of if k]
    index = np.array([first_of[k] for k in uniq], dtype=np.int64)  # increasing, like uniq
    lo, hi, score = _similar_pairs(uniq, threshold)
    lo, hi = index[lo], index[hi]
    order = np.lexsort((lo, hi))  # by later index, then by earlier index
    _, starts = np.unique(hi[order], return_index=True)  # the earliest match of each later row
    for k in order[starts]:
        best[int(hi[k])] = (int(lo[k]), round(float(score[k]), 1))
    return sorted((lo_, hi_, s) for hi_, (lo_, s) in best.items())


def repeats(texts: list[str], threshold: float = THRESHOLD) -> list[tuple[str, int] | None]:
    """For each text, how it repeats an earlier one: ("exact", earlier) when it is the same
    text, ("near", earlier) when `near_duplicates` finds it nearly the same, None when it is
    the first of its kind. The dedupe pass of synthesis: keep the Nones.

    >>> repeats(["Reset the router.", "Call us.", "Reset the router.", "Reset the router!"])
    [None, None, ('exact', 0), ('near', 0)]
    """
    first: dict[str, int] = {}
    out: list[tuple[str, int] | None] = []
    for i, text in enumerate(texts):
        out.append(("exact", first[text]) if text in first else None)
        first.setdefault(text, i)
    for earlier, later, _ in near_duplicates(texts, threshold):
        out[later] = ("near", earlier)
    return out


def _similar_pairs(texts: list[str], threshold: float) -> tuple[np.ndarray, ...]:
    """(i, j, score) arrays, i < j, of texts whose fuzz.ratio reaches the threshold."""
    pairs = _candidates(_signatures(texts)) if len(texts) > 1 else np.empty((0, 2), np.int64)
    if not len(pairs):
        return pairs[:, 0], pairs[:, 1], np.empty(0)
    a = [texts[i] for i in pairs[:, 0]]
    b = [texts[j] for j in pairs[:, 1]]
    scores = process.cpdist(a, b, scorer=fuzz.ratio, score_cutoff=threshold, workers=-1)
    hits = scores >= threshold
    return pairs[hits, 0], pairs[hits, 1], scores[hits]
