"""The sieve's candidates as a user's Tevatron training file: what the cleaning tests feed sieve_clean to
compare its decisions with the project's own stages on the same candidates."""

from __future__ import annotations

import pandas as pd


def tevatron_rows(cands: pd.DataFrame, corpus: pd.DataFrame, queries: pd.DataFrame) -> list[dict]:
    """One Tevatron row per query of ``cands`` (a candidates table), in qid order: its positive and its
    candidates as negatives, with titles and texts from ``corpus`` (indexed by pid) and ``queries``
    (indexed by qid)."""

    def passage(pid: str) -> dict:
        return {"docid": pid, "title": corpus.at[pid, "title"], "text": corpus.at[pid, "text"]}

    return [
        {
            "query_id": qid,
            "query": queries.at[qid, "text"],
            "positive_passages": [passage(group["positive_pid"].iat[0])],
            "negative_passages": [passage(pid) for pid in group["pid"]],
        }
        for qid, group in cands.groupby("qid", sort=True)
    ]
