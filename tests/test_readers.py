"""Readers on small files in the exact upstream layouts (tests/fixtures/*), and on broken inputs."""

from __future__ import annotations

import gzip
import math
import shutil
from pathlib import Path

import pytest
from squad_data import squad36

from pipeline.core.storage import DataError
from pipeline.data.readers import beir, dpr, msmarco, squad
from pipeline.data.readers.base import ctx_pid
from pipeline.data.readers.writer import PidSet

FIX = Path(__file__).parent / "fixtures"


def _gunzip_to(src: Path, dst: Path) -> Path:
    dst.write_bytes(gzip.decompress(src.read_bytes()))
    return dst


# ---- DPR ---------------------------------------------------------------------------------------------


def test_dpr_passages_tsv_quoting_and_multiline_fields():
    passages = list(dpr.read_passages_tsv(FIX / "dpr" / "psgs_w100.tsv"))
    assert [p.pid for p in passages] == [str(i) for i in range(1, 13)]
    assert passages[0].title == "Aaron"
    assert passages[0].text == (
        'Aaron Aaron ( or ; "Ahärôn") is a prophet, high priest, and the brother of Moses.'
    )
    last = passages[-1]
    assert last.title == '"Atlantic" Ocean'
    assert last.text.endswith("oceanic divisions.\nIt covers about 20 percent of Earth's surface.")
    # record = the line on which the row ends (the quoted field spans lines 13-14)
    assert (passages[0].record, last.record) == (2, 14)


def test_dpr_passages_tsv_gzipped_without_extension(tmp_path):
    target = tmp_path / "corpus"  # downloads have no extension: gzip is found by magic bytes
    target.write_bytes(gzip.compress((FIX / "dpr" / "psgs_w100.tsv").read_bytes()))
    assert len(list(dpr.read_passages_tsv(target))) == 12


def test_dpr_biencoder_entries():
    recs = list(dpr.read_biencoder(FIX / "dpr" / "biencoder-nq-train.json.gz", "train"))
    assert [r.qid for r in recs] == ["train-0", "train-1", "train-2", "train-3"]
    first = recs[0]
    assert first.question == "who wrote i will always love you"
    assert [c.pid for c in first.positives] == ["3", "3"]
    assert [c.pid for c in first.hard_negatives] == ["4", "10"]
    assert [c.pid for c in first.negatives] == ["11", "12"]
    assert first.hard_negatives[0].score == pytest.approx(14.2)
    # answers deduplicated in order
    assert recs[1].answers == ["Wilhelm Conrad Röntgen", "Wilhelm Röntgen"]
    # a ctx without passage_id and title
    noid = recs[2].positives[1]
    assert (noid.pid, noid.title) == (None, "")


def test_dpr_biencoder_uses_ids_carried_by_the_file(tmp_path):
    path = tmp_path / "b.json"
    path.write_text('[{"id": 17, "question": "q", "answers": [], "positive_ctxs": []}]')
    assert [r.qid for r in dpr.read_biencoder(path, "dev")] == ["17"]


def test_dpr_qa_csv():
    qs = list(dpr.read_qa_csv(FIX / "dpr" / "nq-test.qa.csv", "test"))
    assert [q.qid for q in qs] == ["test-0", "test-1", "test-2", "test-3"]
    assert qs[1].answers == ["K2", "Mount Godwin-Austen"]
    assert qs[2].text == 'who wrote "i will always love you"'
    assert qs[2].answers == ["Dolly Parton"]
    assert qs[3].text == "who was moses' brother"


def test_dpr_truncated_json_names_file_and_record(tmp_path):
    data = _gunzip_to(FIX / "dpr" / "biencoder-nq-train.json.gz", tmp_path / "x.json").read_bytes()
    cut = tmp_path / "cut.json"
    # cut inside the third entry: two entries parse, the error names index 2
    third = data.index(b'"what is the highest mountain on earth"')
    cut.write_bytes(data[: third + 200])
    gen = dpr.read_biencoder(cut, "train")
    assert len([next(gen), next(gen)]) == 2
    with pytest.raises(DataError) as err:
        next(gen)
    assert err.value.file == str(cut) and err.value.record == 2
    assert "truncated" in str(err.value)


@pytest.mark.parametrize(
    "text, record, near",
    [
        ('[{"question": "q", "answers": ["a"]}, {"question": "r" x}]', 1, '{"question": "r" x'),
        ('[{"question": "q", "answers": ["a"]}, {"question": ', 1, None),
    ],
)
def test_a_json_parser_error_is_one_line_naming_file_record_and_place(tmp_path, text, record, near):
    # issue 28.11: yajl's error is three lines (what, an excerpt, a caret)
    path = tmp_path / "b.json"
    path.write_text(text)
    with pytest.raises(DataError) as err:
        list(dpr.read_biencoder(path, "train"))
    message = str(err.value)
    assert "\n" not in message, message
    assert message.startswith(f"{path}: record {record}: invalid or truncated JSON ("), message
    assert near is None or f"{near}')" in message, message


def test_dpr_truncated_gzip_is_a_data_error(tmp_path):
    raw = (FIX / "dpr" / "biencoder-nq-train.json.gz").read_bytes()
    cut = tmp_path / "train"
    cut.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(DataError, match="truncated"):
        list(dpr.read_biencoder(cut, "train"))


def test_dpr_not_a_json_array(tmp_path):
    path = tmp_path / "b.json"
    path.write_text('{"question": "q"}')
    with pytest.raises(DataError, match="JSON array"):
        list(dpr.read_biencoder(path, "train"))


def test_dpr_ctx_without_text_names_the_field(tmp_path):
    path = tmp_path / "b.json"
    path.write_text('[{"question": "q", "answers": ["a"], "positive_ctxs": [{"title": "t"}]}]')
    with pytest.raises(DataError) as err:
        list(dpr.read_biencoder(path, "train"))
    assert err.value.field == "positive_ctxs[0].text" and err.value.record == 0


def test_dpr_tsv_row_with_missing_column(tmp_path):
    path = tmp_path / "psgs.tsv"
    path.write_text('id\ttext\ttitle\n1\t"a passage"\tA\n2\t"no title here"\n3\t"c"\tC\n')
    with pytest.raises(DataError) as err:
        list(dpr.read_passages_tsv(path))
    assert (err.value.record, err.value.field) == (3, "title")
    assert str(path) in str(err.value)


def test_dpr_tsv_bad_header(tmp_path):
    path = tmp_path / "psgs.tsv"
    path.write_text("pid\tpassage\n1\tx\n")
    with pytest.raises(DataError, match="header"):
        list(dpr.read_passages_tsv(path))


@pytest.mark.parametrize(
    "literal",
    ["Whitney Houston", "'Whitney Houston'", "[1, 2]", "__import__('os').system('true')", "['a', ['b']]"],
)
def test_dpr_qa_csv_answers_must_be_a_list_literal_of_strings(tmp_path, literal):
    path = tmp_path / "t.qa.csv"
    path.write_text(f"fine question\t['x']\nsecond question\t{literal}\n")
    with pytest.raises(DataError) as err:
        list(dpr.read_qa_csv(path, "test"))
    assert (err.value.record, err.value.field) == (2, "answers")


def test_dpr_qa_csv_missing_answer_column(tmp_path):
    path = tmp_path / "t.qa.csv"
    path.write_text("a question without answers\n")
    with pytest.raises(DataError) as err:
        list(dpr.read_qa_csv(path, "test"))
    assert (err.value.record, err.value.field) == (1, "answers")


# ---- MS MARCO ------------------------------------------------------------------------------------


def test_msmarco_collection_keeps_quotes_verbatim():
    passages = list(msmarco.read_collection(FIX / "msmarco" / "collection.tsv"))
    assert [p.pid for p in passages] == [str(i) for i in range(8)]
    assert passages[3].text.startswith('"Definition of ""bluff"": to deceive')
    assert all(p.title == "" for p in passages)


def test_msmarco_stray_carriage_return_stays_inside_its_record(tmp_path):
    path = tmp_path / "collection"
    path.write_bytes(b"0\tone\rpassage\r\n1\ttwo\n")
    assert [(p.pid, p.text) for p in msmarco.read_collection(path)] == [("0", "one\rpassage"), ("1", "two")]


def test_msmarco_queries_and_qrels_4_and_2_columns(tmp_path):
    queries = list(msmarco.read_queries(FIX / "msmarco" / "queries.dev.small.tsv"))
    assert queries[1].qid == "2" and queries[1].text == " Androgen receptor define"
    four = list(msmarco.read_qrels(FIX / "msmarco" / "qrels.train.tsv"))
    assert [(r.qid, r.pid, r.relevance) for r in four][:2] == [("634306", "3", 1), ("1000084", "1", 1)]
    assert four[-1].relevance == 0
    two = tmp_path / "qrels"
    two.write_text("1102400\t7\n1048585 5\n")
    assert [(r.qid, r.pid, r.relevance) for r in msmarco.read_qrels(two)] == [
        ("1102400", "7", 1),
        ("1048585", "5", 1),
    ]


def test_msmarco_bad_rows(tmp_path):
    path = tmp_path / "collection.tsv"
    path.write_text("0\tfine\n1 missing the tab\n")
    with pytest.raises(DataError) as err:
        list(msmarco.read_collection(path))
    assert (err.value.record, err.value.field) == (2, "passage")
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("1\t0\t2\tyes\n")
    with pytest.raises(DataError) as err:
        list(msmarco.read_qrels(qrels))
    assert (err.value.record, err.value.field) == (1, "relevance")


# ---- SQuAD -------------------------------------------------------------------------------------------


def test_squad_paragraphs_questions_answers():
    source, _ = squad36()
    paras = list(squad.read_squad(source))
    assert len(paras) == 1557 and sum(len(p.questions) for p in paras) == 8001
    assert [p.pid for p in paras[:3]] == ["1973_oil_crisis#0", "1973_oil_crisis#1", "1973_oil_crisis#2"]
    assert [p.article for p in paras[:3]] == [0, 0, 0] and len({p.article for p in paras}) == 36
    assert paras[-1].pid == "Warsaw#48" and paras[-1].article == 35
    assert paras[0].title == "1973_oil_crisis"
    q0, q1 = paras[0].questions[:2]
    # five annotator answers each, duplicates removed in first-seen order
    assert q0.qid == "5725b33f6a3fe71400b8952d" and q0.answers == ["October 1973", "October", "1973"]
    assert q1.answers == ["nearly $12", "$12"]


def test_squad_paragraph_without_questions(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(
        '{"data": [{"title": "T", "paragraphs": [{"context": "a", "qas": [{"id": "q", '
        '"question": "?", "answers": [{"text": "a"}]}]}, {"context": "b", "qas": []}]}]}'
    )
    paras = list(squad.read_squad(path))
    assert [p.pid for p in paras] == ["T#0", "T#1"] and paras[1].questions == []


def test_squad_bad_answer_names_the_field(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(
        '{"data": [{"title": "T", "paragraphs": [{"context": "c", "qas": '
        '[{"id": "q", "question": "?", "answers": [{"text": 5}]}]}]}]}'
    )
    with pytest.raises(DataError) as err:
        list(squad.read_squad(path))
    assert err.value.field == "paragraphs[0].qas[0].answers[0].text" and err.value.record == 0


# ---- BEIR / Tevatron ---------------------------------------------------------------------------------


def test_beir_corpus_queries_qrels():
    corpus = list(beir.read_corpus_jsonl(FIX / "beir" / "scifact" / "corpus.jsonl"))
    assert [p.pid for p in corpus] == ["4983", "5836", "7912", "18670", "doc-a"]
    assert corpus[2].title == ""
    queries = list(beir.read_queries_jsonl(FIX / "beir" / "scifact" / "queries.jsonl"))
    assert queries[0].qid == "1" and queries[0].text.startswith("0-dimensional")
    qrels = list(beir.read_qrels_tsv(FIX / "beir" / "scifact" / "qrels" / "test.tsv"))
    assert [(r.qid, r.pid, r.relevance, r.record) for r in qrels][0] == ("36", "18670", 1, 2)
    assert len(qrels) == 4


def test_tevatron_files():
    corpus = list(beir.read_corpus_jsonl(FIX / "beir" / "tevatron" / "corpus.jsonl.gz"))
    assert [p.pid for p in corpus] == ["0", "1", "2", "3"]
    recs = list(beir.read_tevatron_train(FIX / "beir" / "tevatron" / "train.jsonl"))
    assert [r.qid for r in recs] == ["q1", "q2"]
    assert [c.pid for c in recs[1].hard_negatives] == ["2", None]
    assert math.isnan(recs[0].positives[0].score)
    test = list(beir.read_queries_jsonl(FIX / "beir" / "tevatron" / "test.jsonl"))
    assert test[1].answers == ["prophet", "high priest"]


def test_beir_bad_json_line(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"_id": "1", "text": "a"}\n{"_id": "2", "text": \n')
    with pytest.raises(DataError) as err:
        list(beir.read_corpus_jsonl(path))
    assert err.value.record == 2 and "invalid JSON" in str(err.value)


def test_beir_missing_id(tmp_path):
    path = tmp_path / "queries.jsonl"
    path.write_text('{"text": "no id"}\n')
    with pytest.raises(DataError) as err:
        list(beir.read_queries_jsonl(path))
    assert err.value.field == "_id"


# ---- shared pieces -----------------------------------------------------------------------------------


def test_ctx_pid_is_content_derived():
    assert ctx_pid("T", "text") == ctx_pid("T", "text")
    assert ctx_pid("T", "text") != ctx_pid("", "text")
    assert ctx_pid("T", "text").startswith("ctx:") and len(ctx_pid("T", "text")) == 20


def test_pidset_numeric_and_string_pids():
    pids = PidSet()
    for i, pid in enumerate(["3", "1", "x-1", "10", "007"]):
        assert pids.add(pid, i) is None
    assert pids.add("x-1", 9) == 2  # string duplicates are found at once
    assert pids.freeze() is None
    assert "10" in pids and "007" in pids and "7" not in pids and "2" not in pids
    assert len(pids) == 5
    assert pids.add("11", "late") is None and "11" in pids
    assert pids.add("3", "late") is not None  # after freeze numeric duplicates are found at once


def test_pidset_numeric_duplicate_found_at_freeze():
    pids = PidSet()
    for record, pid in enumerate(["5", "6", "5"], start=2):
        pids.add(pid, record)
    assert pids.freeze() == ("5", 2, 4)


def test_fixture_copy_keeps_layout(tmp_path):
    # the fixtures are read where they are; a copy under another name reads the same
    copy = shutil.copy(squad36()[0], tmp_path / "source")
    assert len(list(squad.read_squad(copy))) == 1557


# ---- issue 28.8: bad UTF-8 is reported at its own record ---------------------------------------------

BAD = b"\xff"


def _lines_with_bad_byte(make_line, n: int, bad: int) -> bytes:
    """n lines from make_line(i) (1-based line numbers), line ``bad`` with an invalid UTF-8 byte."""
    lines = [make_line(i) for i in range(1, n + 1)]
    lines[bad - 1] = lines[bad - 1].replace(b"word", b"wo" + BAD + b"rd", 1)
    assert BAD in lines[bad - 1]
    return b"".join(lines)


LINE_READERS = {
    "msmarco collection": (msmarco.read_collection, lambda i: b"%d\tpassage word %d\n" % (i, i), 0),
    "msmarco queries": (msmarco.read_queries, lambda i: b"%d\tquery word\n" % i, 0),
    "msmarco qrels": (msmarco.read_qrels, lambda i: b"%d\t0\tword%d\t1\n" % (i, i), 0),
    "beir corpus": (beir.read_corpus_jsonl, lambda i: b'{"_id": "%d", "text": "word"}\n' % i, 0),
    "beir queries": (beir.read_queries_jsonl, lambda i: b'{"_id": "%d", "text": "word"}\n' % i, 0),
    "beir qrels": (beir.read_qrels_tsv, lambda i: b"q%d\tword%d\t1\n" % (i, i), 0),
    "tevatron train": (
        beir.read_tevatron_train,
        lambda i: b'{"query_id": "q%d", "query": "word", "positive_passages": []}\n' % i,
        0,
    ),
    "dpr passages": (dpr.read_passages_tsv, lambda i: b'%d\t"text word"\ttitle\n' % i, 1),
    "dpr qa.csv": (lambda p: dpr.read_qa_csv(p, "test"), lambda i: b"question word %d\t['a']\n" % i, 0),
}


@pytest.mark.parametrize("n, bad", [(3, 2), (3, 3), (5000, 1), (5000, 1500), (5000, 4999)])
@pytest.mark.parametrize("reader", LINE_READERS)
def test_bad_utf8_in_a_line_file_names_its_line(tmp_path, reader, n, bad):
    read, make_line, header = LINE_READERS[reader]
    head = b"id\ttext\ttitle\n" if header else b""
    # the header takes line 1: the records start at line 2
    body = _lines_with_bad_byte(make_line, n, bad)
    path = tmp_path / "source"
    path.write_bytes(head + body)
    with pytest.raises(DataError) as err:
        list(read(path))
    assert err.value.file == str(path) and err.value.record == bad + header, str(err.value)
    assert "UTF-8" in str(err.value)


def test_bad_utf8_in_a_gzipped_line_file_names_its_line(tmp_path):
    path = tmp_path / "collection"
    path.write_bytes(gzip.compress(_lines_with_bad_byte(lambda i: b"%d\tword\n" % i, 20000, 12345)))
    with pytest.raises(DataError) as err:
        list(msmarco.read_collection(path))
    assert err.value.record == 12345 and "UTF-8" in str(err.value)


def _json_items(n: int, bad: int) -> bytes:
    items = [
        b'{"question": "q%d word", "answers": ["a"], "positive_ctxs": [{"text": "t", "passage_id": "1"}]}' % i
        for i in range(n)
    ]
    items[bad] = items[bad].replace(b"word", b"wo" + BAD + b"rd")
    return b"[" + b",\n".join(items) + b"]"


@pytest.mark.parametrize("n, bad", [(2, 0), (2, 1), (5000, 1), (5000, 3000)])
def test_bad_utf8_in_a_biencoder_file_names_its_item(tmp_path, n, bad):
    path = tmp_path / "train.json"
    path.write_bytes(_json_items(n, bad))
    with pytest.raises(DataError) as err:
        list(dpr.read_biencoder(path, "train"))
    assert err.value.file == str(path) and err.value.record == bad, str(err.value)
    assert "UTF-8" in str(err.value)


@pytest.mark.parametrize("n, bad", [(2, 0), (2, 1), (3000, 2000)])
def test_bad_utf8_in_a_squad_file_names_its_article(tmp_path, n, bad):
    articles = [b'{"title": "T%d", "paragraphs": [{"context": "word", "qas": []}]}' % i for i in range(n)]
    articles[bad] = articles[bad].replace(b"word", b"wo" + BAD + b"rd")
    path = tmp_path / "squad.json"
    path.write_bytes(b'{"data": [' + b", ".join(articles) + b"]}")
    with pytest.raises(DataError) as err:
        list(squad.read_squad(path))
    assert err.value.file == str(path) and err.value.record == bad, str(err.value)
    assert "UTF-8" in str(err.value)


def test_bad_utf8_line_is_counted_as_the_csv_reader_counts_lines(tmp_path):
    # A "\r" alone inside a quoted field ends a line for the csv reader (newline=""): the line of the
    # bad bytes is counted the same way as the line of any other error.
    head = b'id\ttext\ttitle\n1\t"a\rb"\tA\n'
    short, bad = tmp_path / "short.tsv", tmp_path / "bad.tsv"
    short.write_bytes(head + b'2\t"c"\n')
    bad.write_bytes(head + b'2\t"c\xff"\tB\n')
    with pytest.raises(DataError) as missing_column:
        list(dpr.read_passages_tsv(short))
    with pytest.raises(DataError) as bad_utf8:
        list(dpr.read_passages_tsv(bad))
    assert bad_utf8.value.record == missing_column.value.record == 4


# ---- issue 28.9: ids are valid in TREC files (no whitespace) -----------------------------------------


def test_squad_title_with_spaces_gives_a_pid_without_whitespace(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(
        '{"data": [{"title": "Oil crisis\\tof 1973", "paragraphs": [{"context": "c", "qas": []}, '
        '{"context": "d", "qas": []}]}, {"title": "Warsaw", "paragraphs": [{"context": "e", "qas": []}]}]}'
    )
    paras = list(squad.read_squad(path))
    assert [p.pid for p in paras] == ["Oil_crisis_of_1973#0", "Oil_crisis_of_1973#1", "Warsaw#0"]
    assert paras[0].title == "Oil crisis\tof 1973"  # the title itself is kept as written


def test_squad_titles_that_give_the_same_pids_are_refused(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(
        '{"data": [{"title": "Oil_crisis", "paragraphs": [{"context": "c", "qas": []}]}, '
        '{"title": "Oil crisis", "paragraphs": [{"context": "d", "qas": []}]}]}'
    )
    with pytest.raises(DataError) as err:
        list(squad.read_squad(path))
    assert (err.value.file, err.value.record, err.value.field) == (str(path), 1, "title")
    assert "'Oil_crisis'" in str(err.value) and "article 0" in str(err.value)


SPACED_IDS = {
    # name: (reader, file content, record, field)
    "beir corpus _id": (
        beir.read_corpus_jsonl,
        '{"_id": "d0", "text": "a"}\n{"_id": "d 1", "text": "b"}\n',
        2,
        "_id",
    ),
    "tevatron corpus docid": (beir.read_corpus_jsonl, '{"docid": "d\\t1", "text": "b"}\n', 1, "docid"),
    "beir queries _id": (beir.read_queries_jsonl, '{"_id": "q 1", "text": "b"}\n', 1, "_id"),
    "beir qrels corpus-id": (beir.read_qrels_tsv, "query-id\tcorpus-id\tscore\nq1\td 1\t1\n", 2, "corpus-id"),
    "beir qrels query-id": (beir.read_qrels_tsv, "q 1\td1\t1\n", 1, "query-id"),
    "tevatron query_id": (
        beir.read_tevatron_train,
        '{"query_id": "q 1", "query": "x", "positive_passages": []}\n',
        1,
        "query_id",
    ),
    "tevatron passage docid": (
        beir.read_tevatron_train,
        '{"query_id": "q1", "query": "x", "positive_passages": [{"docid": "d 1", "text": "t"}]}\n',
        1,
        "positive_passages[0].docid",
    ),
    "msmarco pid": (msmarco.read_collection, "0\ta\n1 \tb\n", 2, "pid"),
    "msmarco qid": (msmarco.read_queries, "q\u00a01\ta query\n", 1, "qid"),
    "dpr passage id": (dpr.read_passages_tsv, 'id\ttext\ttitle\n1\t"a"\tA\n2 3\t"b"\tB\n', 3, "id"),
    "dpr entry id": (
        lambda p: dpr.read_biencoder(p, "train"),
        '[{"id": "q 1", "question": "q", "answers": [], "positive_ctxs": []}]',
        0,
        "id",
    ),
    "dpr passage_id": (
        lambda p: dpr.read_biencoder(p, "train"),
        '[{"question": "q", "answers": [], "positive_ctxs": [{"text": "t", "passage_id": "1 2"}]}]',
        0,
        "positive_ctxs[0].passage_id",
    ),
    "squad question id": (
        squad.read_squad,
        '{"data": [{"title": "T", "paragraphs": [{"context": "c", "qas": [{"id": "q 1", "question": "?", '
        '"answers": []}]}]}]}',
        0,
        "paragraphs[0].qas[0].id",
    ),
}


@pytest.mark.parametrize("case", SPACED_IDS)
def test_an_id_with_whitespace_is_refused_naming_file_record_and_field(tmp_path, case):
    read, content, record, field = SPACED_IDS[case]
    path = tmp_path / "source"
    path.write_text(content)
    with pytest.raises(DataError) as err:
        list(read(path))
    assert (err.value.file, err.value.record, err.value.field) == (str(path), record, field)
    assert "whitespace" in str(err.value) and "TREC" in str(err.value)
