"""Placeholder until the rlm_steps importer lands (being written now); detects nothing."""

NAME = "rlm_steps"


def sniff(head) -> bool:
    return False


def parse(source, problems):
    raise NotImplementedError("rlm_steps importer not written yet")
