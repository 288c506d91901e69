"""Rebuild the shipped default fits from the reference Azure 2023 traces.

    python -m inferencegym.workload.shipped [REFERENCE_DIR]

REFERENCE_DIR defaults to ``$INFERENCEGYM_REFERENCE_DIR`` or ``../shared/reference`` beside the
repository. Writes ``inferencegym/data/fits/azure_{conv,code}.json`` (figures only, no rows).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .fit import DEFAULT_FITS, FITS_DIR, fit_workload
from .sources import load_trace

SOURCES = {"azure_conv": "traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv",
           "azure_code": "traces/azure_llm_2023/AzureLLMInferenceTrace_code.csv"}


def build(reference_dir: Path, out_dir: Path = FITS_DIR) -> list[Path]:
    out = []
    for name, rel in SOURCES.items():
        w = load_trace(reference_dir / rel, format="azure")
        fit = fit_workload(w, source=f"Azure LLM inference trace 2023 ({rel.rsplit('/', 1)[-1]}), CC-BY-4.0")
        path = out_dir / DEFAULT_FITS[name]
        fit.save(path)
        out.append(path)
    return out


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv:
        ref = Path(argv[0])
    else:
        ref = Path(os.environ.get("INFERENCEGYM_REFERENCE_DIR",
                                  Path(__file__).resolve().parents[2].parent / "shared" / "reference"))
    for p in build(ref):
        print(p)


if __name__ == "__main__":
    main()
