"""Placeholder until the rlm_trajectory importer lands (being written now); detects nothing."""

NAME = "rlm_trajectory"


def sniff(head) -> bool:
    return False


def parse(source, problems):
    raise NotImplementedError("rlm_trajectory importer not written yet")
