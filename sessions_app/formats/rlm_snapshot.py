"""Placeholder until the rlm_snapshot importer lands (being written now); detects nothing."""

NAME = "rlm_snapshot"


def sniff(head) -> bool:
    return False


def parse(source, problems):
    raise NotImplementedError("rlm_snapshot importer not written yet")
