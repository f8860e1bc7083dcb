"""A corpus of hostile model and range files, made from genuine ones.

Each case is a model file (and its range file) that ``kcheck predict`` must refuse with exit
code 2 and one line, never a crash: the ones that crashed or fooled LIBLINEAR's and LIBSVM's
own loaders (a regression model without labels, a header whose sizes overflow, a missing
``rho``, a truncated support-vector section...) and their neighbours. The genuine models are
trained here with the PyPI bindings on bundled data, so the corpus needs nothing else.

    python tests/model_corpus.py OUT_DIR     # write the corpus (one MODEL + MODEL.range each)
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from liblinear import liblinearutil as ll
from libsvm import svmutil as sv

ROOT = Path(__file__).resolve().parent.parent
HEART = ROOT / "datasets" / "heart_scale"
INT_MAX = 2**31 - 1


@dataclass(frozen=True)
class Case:
    name: str
    model: bytes
    #: Words the one error line must contain.
    words: tuple[str, ...]
    range_file: bytes | None = None
    #: Extra ``kcheck predict`` options (e.g. a small --memory-limit).
    options: tuple[str, ...] = field(default=())


def _heart() -> tuple[list[float], list[dict[int, float]]]:
    y, x = sv.svm_read_problem(str(HEART))
    return list(y), list(x)


def _three_classes() -> tuple[list[float], list[dict[int, float]]]:
    """heart_scale's rows with three labels (by the sign pattern of two features)."""
    y, x = _heart()
    labels = [float(1 + (r.get(1, 0.0) > 0) + (r.get(5, 0.0) > 0)) for r in x]
    return labels, x


def genuine_models(tmp: Path) -> dict[str, bytes]:
    """Model files as the bindings write them, by name."""
    y, x = _heart()
    y3, x3 = _three_classes()
    out: dict[str, bytes] = {}

    def keep(name: str, save: Callable[[str], None]) -> None:
        path = tmp / name
        save(str(path))
        out[name] = path.read_bytes()

    for name, (yy, xx, opts) in {
        "linear": (y, x, "-s 2 -B 1 -q"),
        "linear3": (y3, x3, "-s 2 -B 1 -q"),
        "crammer_singer": (y, x, "-s 4 -q"),
        "regression": (y, x, "-s 11 -q"),
        "regression_dual": (y, x, "-s 12 -q"),
        "one_class_linear": (y, x, "-s 21 -q"),
    }.items():
        model = ll.train(yy, xx, opts)
        keep(name, lambda p, m=model: ll.save_model(p, m))
    for name, (yy, xx, opts) in {
        "rbf": (y, x, "-s 0 -t 2 -q"),
        "rbf3": (y3, x3, "-s 0 -t 2 -q"),
        "poly_prob": (y, x, "-s 0 -t 1 -b 1 -q"),
        "rbf3_prob": (y3, x3, "-s 0 -t 2 -b 1 -q"),
        "precomputed": (
            y,
            [{0: float(i + 1), **{i + 1: 1.0}} for i in range(len(x))],
            "-s 0 -t 4 -q",
        ),
        "one_class": (y, x, "-s 2 -q"),
        "epsilon_svr": (y, x, "-s 3 -q"),
        "nu_svr": (y, x, "-s 4 -q"),
    }.items():
        model = sv.svm_train(yy, xx, opts)
        keep(name, lambda p, m=model: sv.svm_save_model(p, m))
    return out


def heart_range() -> bytes:
    """An svm-scale range file for heart_scale's 13 features (max-abs form)."""
    return b"x\n-1 1\n" + b"".join(b"%d -1 1\n" % j for j in range(1, 14))


def _replace(text: bytes, old: bytes, new: bytes) -> bytes:
    assert old in text, (old, text[:200])
    return text.replace(old, new, 1)


def _header_line(text: bytes, key: bytes) -> bytes:
    for line in text.splitlines(keepends=True):
        if line.split()[:1] == [key]:
            return line
    raise AssertionError(f"no {key!r} line")


def _drop(text: bytes, key: bytes) -> bytes:
    return _replace(text, _header_line(text, key), b"")


def _set(text: bytes, key: bytes, value: bytes) -> bytes:
    return _replace(text, _header_line(text, key), key + b" " + value + b"\n")


def _split_body(text: bytes, marker: bytes) -> tuple[bytes, list[bytes]]:
    head, body = text.split(b"\n" + marker + b"\n", 1)
    return head + b"\n" + marker + b"\n", body.splitlines(keepends=True)


def cases(tmp: Path) -> list[Case]:
    g = genuine_models(tmp)
    lin, lin3, rbf, rbf3 = g["linear"], g["linear3"], g["rbf"], g["rbf3"]
    prob, prob3 = g["poly_prob"], g["rbf3_prob"]
    w_head, w_lines = _split_body(lin, b"w")
    sv_head, sv_lines = _split_body(rbf, b"SV")
    sv3_head, sv3_lines = _split_body(rbf3, b"SV")
    first_sv = sv_lines[0].split()
    c: list[Case] = [
        # --- kinds kcheck cannot use ---------------------------------------------------------
        Case("liblinear_regression", g["regression"], ("regression", ":1:")),
        Case("liblinear_regression_dual", g["regression_dual"], ("regression",)),
        Case("liblinear_one_class", g["one_class_linear"], ("one-class",)),
        Case("libsvm_one_class", g["one_class"], ("one-class", ":1:")),
        Case("libsvm_epsilon_svr", g["epsilon_svr"], ("regression",)),
        Case("libsvm_nu_svr", g["nu_svr"], ("regression",)),
        Case("libsvm_precomputed", g["precomputed"], ("precomputed", ":2:")),
        # A regression model relabelled as a classifier still has no label line.
        Case(
            "liblinear_regression_relabelled",
            _set(g["regression"], b"solver_type", b"L2R_L2LOSS_SVC"),
            ("no label line",),
        ),
        # --- LIBLINEAR headers ---------------------------------------------------------------
        Case(
            "liblinear_overflow_nr_w",
            _set(_set(lin3, b"nr_feature", b"1073741823"), b"nr_class", b"4").replace(
                _header_line(lin3, b"label"), b"label 1 2 3 4\n"
            ),
            ("more weights than LIBLINEAR can index",),
        ),
        Case(
            "liblinear_nr_feature_1e12",
            _set(lin, b"nr_feature", b"1e12"),
            ("expected an integer for nr_feature", "'1e12'"),
        ),
        Case(
            "liblinear_nr_feature_int_max",
            _set(lin, b"nr_feature", b"%d" % INT_MAX),
            ("more weights than LIBLINEAR can index",),
        ),
        Case(
            "liblinear_nr_feature_int_max_no_bias",
            _set(_set(lin, b"nr_feature", b"%d" % INT_MAX), b"bias", b"-1"),
            ("over the memory limit",),
        ),
        Case(
            "liblinear_nr_feature_beyond_int",
            _set(lin, b"nr_feature", b"%d" % 2**40),
            ("nr_feature must lie in",),
        ),
        Case(
            "liblinear_nr_feature_negative",
            _set(lin, b"nr_feature", b"-5"),
            ("nr_feature must lie in",),
        ),
        Case(
            "liblinear_nr_feature_too_big_for_limit",
            _set(lin, b"nr_feature", b"50000000"),
            ("over the memory limit",),
            options=("--memory-limit", "1G"),
        ),
        Case(
            "liblinear_truncated_weights",
            _set(lin, b"nr_feature", b"100"),
            ("expected 101 weight lines", "truncated"),
        ),
        Case("liblinear_nr_class_zero", _set(lin, b"nr_class", b"0"), ("nr_class must lie",)),
        Case(
            "liblinear_nr_class_huge", _set(lin, b"nr_class", b"%d" % 2**31), ("nr_class must lie",)
        ),
        Case(
            "liblinear_label_before_nr_class",
            _replace(
                _drop(lin, b"nr_class"),
                b"solver_type L2R_L2LOSS_SVC\n",
                b"solver_type L2R_L2LOSS_SVC\nlabel 1 -1\nnr_class 2\n",
            ).replace(b"label 1 -1\nnr_feature", b"nr_feature", 1),
            ("expected nr_class before label",),
        ),
        Case(
            "liblinear_label_count",
            _set(lin, b"label", b"1 -1 2"),
            ("expected 2 values for label, found 3",),
        ),
        Case("liblinear_label_duplicate", _set(lin, b"label", b"1 1"), ("distinct",)),
        Case(
            "liblinear_label_not_int",
            _set(lin, b"label", b"1.5 -1"),
            ("expected an integer for label",),
        ),
        Case(
            "liblinear_label_beyond_int",
            _set(lin, b"label", b"%d -1" % 2**31),
            ("label must lie in",),
        ),
        Case("liblinear_no_bias", _drop(lin, b"bias"), ("no bias line",)),
        Case("liblinear_bias_nan", _set(lin, b"bias", b"nan"), ("finite",)),
        Case("liblinear_no_w", lin.split(b"\nw\n")[0] + b"\n", ("expected a 'w' line",)),
        Case(
            "liblinear_unknown_key",
            _replace(lin, b"\nw\n", b"\nrho 3\nw\n"),
            ("unknown key 'rho'",),
        ),
        Case(
            "liblinear_unknown_solver",
            _set(lin, b"solver_type", b"L2R_MAGIC"),
            ("unknown LIBLINEAR solver_type",),
        ),
        Case(
            "liblinear_duplicate_key",
            _replace(lin, b"\nw\n", b"\nnr_class 2\nw\n"),
            ("appears twice",),
        ),
        Case("liblinear_text_after_w", _replace(lin, b"\nw\n", b"\nw 1\n"), ("nothing after 'w'",)),
        # --- LIBLINEAR weights ---------------------------------------------------------------
        Case("liblinear_weight_nan", w_head + b"nan \n" + b"".join(w_lines[1:]), ("finite", ":7:")),
        Case(
            "liblinear_weight_inf",
            w_head + b"".join(w_lines[:3]) + b"-inf \n" + b"".join(w_lines[4:]),
            ("finite", ":10:"),
        ),
        Case(
            "liblinear_weight_garbage",
            w_head + b"abc \n" + b"".join(w_lines[1:]),
            ("expected a number",),
        ),
        Case(
            "liblinear_weight_hex",
            w_head + b"0x1p3 \n" + b"".join(w_lines[1:]),
            ("expected a number",),
        ),
        Case(
            "liblinear_weight_underscore",
            w_head + b"1_0 \n" + b"".join(w_lines[1:]),
            ("expected a number",),
        ),
        Case(
            "liblinear_weight_two_on_a_line",
            w_head + b"1 2 \n" + b"".join(w_lines[1:]),
            ("expected 1 weight on the line, found 2",),
        ),
        Case(
            "liblinear_weight_missing_line",
            w_head + b"".join(w_lines[:5]) + b"\n" + b"".join(w_lines[6:]),
            ("expected 1 weight on the line, found 0",),
        ),
        Case("liblinear_text_after_weights", lin + b"1 2 3\n", ("expected the end of the file",)),
        Case(
            "liblinear_crammer_singer_one_column",
            b"".join(
                ln.split(b" ")[0] + b" \n" if i > 5 else ln
                for i, ln in enumerate(g["crammer_singer"].splitlines(keepends=True))
            ),
            ("expected 2 weights on the line, found 1",),
        ),
        # --- LIBSVM headers ------------------------------------------------------------------
        Case("libsvm_no_rho", _drop(rbf, b"rho"), ("no rho line",)),
        Case("libsvm_no_label", _drop(rbf, b"label"), ("no label line",)),
        Case("libsvm_no_nr_sv", _drop(rbf, b"nr_sv"), ("no nr_sv line",)),
        Case(
            "libsvm_huge_total_sv",
            _set(
                _set(rbf, b"total_sv", b"%d" % INT_MAX),
                b"nr_sv",
                b"%d %d" % (INT_MAX // 2, INT_MAX - INT_MAX // 2),
            ),
            ("over the memory limit",),
        ),
        Case("libsvm_total_sv_negative", _set(rbf, b"total_sv", b"-1"), ("total_sv must lie",)),
        Case(
            "libsvm_nr_sv_disagrees",
            _set(rbf, b"nr_sv", b"1 1"),
            ("nr_sv adds up to 2", "total_sv"),
        ),
        Case("libsvm_rho_count", _set(rbf3, b"rho", b"1 2"), ("expected 3 values for rho",)),
        Case(
            "libsvm_rho_before_nr_class",
            _replace(_drop(rbf, b"rho"), b"kernel_type rbf\n", b"kernel_type rbf\nrho 0.5\n"),
            ("expected nr_class before rho",),
        ),
        Case(
            "libsvm_probA_only",
            _replace(rbf, b"\nnr_sv", b"\nprobA 1\nnr_sv"),
            ("both probA and probB",),
        ),
        Case(
            "libsvm_prob_density_marks",
            _replace(rbf, b"\nnr_sv", b"\nprob_density_marks 1 2 3 4 5 6 7 8 9 10\nnr_sv"),
            ("one-class",),
        ),
        # --- LIBSVM probability fields (svm-train -b 1), also used with -b 1 --------------------
        Case(
            "libsvm_probA_nan",
            _set(prob, b"probA", b"nan"),
            ("finite", "probA", ":10:"),
            options=("-b", "1"),
        ),
        Case(
            "libsvm_probB_inf",
            _set(prob, b"probB", b"-inf"),
            ("finite", "probB", ":11:"),
            options=("-b", "1"),
        ),
        Case(
            "libsvm_probB_garbage",
            _set(prob, b"probB", b"0x1p3"),
            ("expected a number",),
            options=("-b", "1"),
        ),
        Case(
            "libsvm_probA_empty",
            _set(prob, b"probA", b""),
            ("expected 1 value for probA, found 0",),
            options=("-b", "1"),
        ),
        Case(
            "libsvm_probA_count",
            _set(prob3, b"probA", b"1 2"),
            ("expected 3 values for probA, found 2",),
            options=("-b", "1"),
        ),
        Case(
            "libsvm_probB_count",
            _set(prob3, b"probB", b"1 2 3 4"),
            ("expected 3 values for probB, found 4",),
            options=("-b", "1"),
        ),
        Case(
            "libsvm_probA_before_nr_class",
            _replace(_drop(prob, b"probA"), b"kernel_type", b"probA 1\nkernel_type"),
            ("expected nr_class before probA",),
            options=("-b", "1"),
        ),
        Case(
            "libsvm_probA_twice",
            _replace(prob, b"\nprobB", b"\nprobA 1\nprobB"),
            ("'probA' appears twice",),
            options=("-b", "1"),
        ),
        Case(
            "libsvm_probB_only",
            _drop(prob, b"probA"),
            ("both probA and probB",),
            options=("-b", "1"),
        ),
        Case(
            "libsvm_prob_density_marks_with_probabilities",
            _replace(prob, b"\nnr_sv", b"\nprob_density_marks 0.1 0.2\nnr_sv"),
            ("prob_density_marks", "one-class"),
            options=("-b", "1"),
        ),
        Case(
            "b1_model_without_probabilities",
            rbf,
            ("no probability information", "-b 1"),
            options=("-b", "1"),
        ),
        Case("b1_liblinear_svc", lin, ("only for logistic regression",), options=("-b", "1")),
        Case(
            "b1_liblinear_crammer_singer",
            g["crammer_singer"],
            ("only for logistic regression",),
            options=("-b", "1"),
        ),
        Case("libsvm_gamma_missing", _drop(rbf, b"gamma"), ("no gamma line",)),
        Case("libsvm_gamma_negative", _set(rbf, b"gamma", b"-1"), ("gamma >= 0",)),
        Case("libsvm_degree_missing", _drop(g["poly_prob"], b"degree"), ("no degree line",)),
        Case(
            "libsvm_unknown_svm_type",
            _set(rbf, b"svm_type", b"w_svm"),
            ("unknown LIBSVM svm_type",),
        ),
        Case(
            "libsvm_unknown_kernel",
            _set(rbf, b"kernel_type", b"laplace"),
            ("unknown LIBSVM kernel_type",),
        ),
        Case("libsvm_nr_class_huge", _set(rbf, b"nr_class", b"100000"), ("more classes than",)),
        Case("libsvm_no_sv_line", rbf.split(b"\nSV\n")[0] + b"\n", ("expected an 'SV' line",)),
        # --- LIBSVM support vectors ----------------------------------------------------------
        Case(
            "libsvm_truncated_svs",
            sv_head + b"".join(sv_lines[: len(sv_lines) // 2]),
            ("support vectors (total_sv)", "truncated"),
        ),
        Case(
            "libsvm_garbage_sv_line",
            sv_head + b"garbage here\n" + b"".join(sv_lines[1:]),
            ("expected a number",),
        ),
        Case("libsvm_blank_sv_line", sv_head + b"\n" + b"".join(sv_lines[1:]), ("blank line",)),
        Case(
            "libsvm_sv_index_zero",
            sv_head + b"1 0:0.5 \n" + b"".join(sv_lines[1:]),
            ("feature indices from 1",),
        ),
        Case(
            "libsvm_sv_unsorted",
            sv_head
            + b" ".join([first_sv[0], first_sv[2], first_sv[1]])
            + b"\n"
            + b"".join(sv_lines[1:]),
            ("increasing order",),
        ),
        Case(
            "libsvm_sv_duplicate_index",
            sv_head + b"1 3:1 3:2\n" + b"".join(sv_lines[1:]),
            ("increasing order",),
        ),
        Case(
            "libsvm_sv_index_beyond_int",
            sv_head + b"1 %d:1\n" % 2**31 + b"".join(sv_lines[1:]),
            ("feature indices from 1 to 2147483647",),
        ),
        Case("libsvm_sv_value_nan", sv_head + b"1 1:nan\n" + b"".join(sv_lines[1:]), ("finite",)),
        Case(
            "libsvm_sv_missing_colon",
            sv_head + b"1 1:0.5 7\n" + b"".join(sv_lines[1:]),
            ("expected index:value",),
        ),
        Case(
            "libsvm_sv_one_coefficient_of_two",
            sv3_head + b"0.5 1:1 2:1\n" + b"".join(sv3_lines[1:]),
            ("2 coefficients",),
        ),
        Case("libsvm_extra_svs", rbf + sv_lines[0], ("expected the end of the file",)),
        # --- not model files at all ----------------------------------------------------------
        Case("empty", b"", ("not a LIBLINEAR or LIBSVM model file",)),
        Case("binary", bytes(range(256)) * 4, ("not a LIBLINEAR or LIBSVM model file",)),
        Case(
            "long_line",
            b"svm_type " + b"c" * (3 << 20),
            ("line longer than",),
            options=("--memory-limit", "32M"),
        ),
        Case(
            "weights_without_newline",
            w_head + b"1" * (3 << 20),
            ("line longer than",),
            options=("--memory-limit", "32M"),
        ),
    ]
    # --- range files next to a genuine model -------------------------------------------------
    good = heart_range()
    c += [
        # A LIBSVM model has no width of its own: the memory guard refuses the range file.
        Case(
            "range_index_1e8",
            rbf,
            (".range:16:", "100000000", "over the memory limit"),
            range_file=good + b"100000000 0 1\n",
            options=("--memory-limit", "1G"),
        ),
        # A LIBLINEAR model's width bounds its range file.
        Case(
            "range_index_1e8_linear",
            lin,
            (".range:16:", "beyond the model's 13 features"),
            range_file=good + b"100000000 0 1\n",
        ),
        Case(
            "range_index_1e30",
            lin,
            ("at most 2147483647",),
            range_file=good + b"1" + b"0" * 30 + b" 0 1\n",
        ),
        Case(
            "range_index_float", lin, ("expected 'index min max'",), range_file=good + b"1e30 0 1\n"
        ),
        Case("range_nan", rbf, ("finite",), range_file=good + b"20 nan 1\n"),
        Case("range_unsorted", lin, ("greater than 13",), range_file=good + b"5 0 1\n"),
        Case(
            "range_long_line",
            lin,
            ("line longer than",),
            range_file=b"x\n" + b"1" * (3 << 20),
            options=("--memory-limit", "32M"),
        ),
        Case("range_binary", lin, ("range",), range_file=bytes(range(256))),
        # --- the y section (svm-scale -y) ------------------------------------------------
        Case(
            "range_y_min_above_max",
            rbf,
            (".range:3:", "y_min <= y_max"),
            range_file=b"y\n0 1\n3 2\n" + good,
        ),
        Case("range_y_nan", rbf, (".range:3:", "finite"), range_file=b"y\n0 1\nnan 2\n" + good),
        Case(
            "range_y_bounds_reversed",
            lin,
            (".range:2:", "y_lower < y_upper"),
            range_file=b"y\n1 0\n1 2\n" + good,
        ),
        Case(
            "range_y_too_wide",
            lin,
            (".range:3:", "too wide"),
            range_file=b"y\n0 1\n-1e308 1e308\n" + good,
        ),
        Case(
            "range_y_truncated",
            lin,
            (".range:3:", "expected 'y_min y_max'"),
            range_file=b"y\n0 1\n",
        ),
        Case(
            "range_y_without_x",
            lin,
            (".range:4:", "expected 'x'"),
            range_file=b"y\n0 1\n1 2\n" + good[2:],
        ),
        Case(
            "range_y_three_numbers",
            lin,
            (".range:2:", "expected 'y_lower y_upper'"),
            range_file=b"y\n0 1 2\n1 2\n" + good,
        ),
        # One training label only: heart_scale's other label cannot be scaled.
        Case(
            "range_y_single_label",
            lin,
            (".range", "cannot scale label -1"),
            range_file=b"y\n0 1\n1 1\n" + good,
        ),
    ]
    return c


def write(directory: Path) -> list[tuple[Case, Path]]:
    """Write every case as DIR/NAME.model and DIR/NAME.model.range; (case, model path)."""
    directory.mkdir(parents=True, exist_ok=True)
    scratch = directory / "genuine"
    scratch.mkdir(exist_ok=True)
    out = []
    for case in cases(scratch):
        path = directory / f"{case.name}.model"
        path.write_bytes(case.model)
        Path(f"{path}.range").write_bytes(case.range_file or heart_range())
        out.append((case, path))
    return out


def mutations_seed_models(tmp: Path) -> dict[str, bytes]:
    """The genuine classifier models the fuzz test mutates."""
    g = genuine_models(tmp)
    return {
        k: g[k]
        for k in ("linear", "linear3", "crammer_singer", "rbf", "rbf3", "poly_prob", "rbf3_prob")
    }


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    written = write(Path(sys.argv[1]))
    print(f"{len(written)} cases in {sys.argv[1]}")
