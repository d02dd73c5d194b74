"""Which language a text is in, as far as the product cares: Chinese (and other CJK) or not. The write
path's prompts and the read path's block both ask."""

from __future__ import annotations

import re

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


def detect_language(texts: list[str]) -> str:
    """'zh' when CJK characters make up a good share of the letters, else 'en'."""
    sample = " ".join(texts)[:4000]
    letters = sum(map(str.isalpha, sample))   # counted in C: recall asks twice a request
    cjk = len(_CJK.findall(sample))
    return "zh" if letters and cjk / letters > 0.2 else "en"
