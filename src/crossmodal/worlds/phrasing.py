"""The English the worlds' sentences need: the indefinite article of a word and the plural of a shape noun."""
from __future__ import annotations


def article(word: str) -> str:
    """"an" before a vowel letter, else "a"."""
    return "an" if word[0] in "aeiou" else "a"


def plural(noun: str) -> str:
    """noun + "es" after s, x, ch, sh (crosses), else + "s"."""
    return noun + ("es" if noun.endswith(("s", "x", "ch", "sh")) else "s")
