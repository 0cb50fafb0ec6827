"""Placeholder until the rlm_native importer lands (being written now); detects nothing."""

NAME = "rlm_native"


def sniff(head) -> bool:
    return False


def parse(source, problems):
    raise NotImplementedError("rlm_native importer not written yet")
