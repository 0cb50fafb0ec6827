"""Placeholder until the agentlens importer lands (being written now); detects nothing."""

NAME = "agentlens"


def sniff(head) -> bool:
    return False


def parse(source, problems):
    raise NotImplementedError("agentlens importer not written yet")
