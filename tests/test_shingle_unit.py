"""The shingle unit `char` (seed article 3.1): character n-grams of the normalized text.

Word shingles already treat every CJK ideograph as a token, so a Chinese pair without spaces gives
the same shingles under both units (punctuation aside: char keeps one space per separator run).
Scripts without word boundaries outside the CJK ranges (Thai here) are one long "word" per run
under the word unit, so one edited character changes the whole token: only char finds the pair.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from webdedup_assets.cli.main import main
from webdedup_assets.core.fingerprint import fingerprint_texts, shingle_sets
from webdedup_assets.core.minhash import MinHashParams
from webdedup_assets.core.reference import char_tokens, jaccard, shingle_set

# A Chinese paragraph without spaces, and a copy with two characters changed and one phrase added.
ZH = (
    "每天晚上计费系统导出当天的发票支付处理机构提供结算文件对账程序按照参考编号金额和币种"
    "将每一笔已结算的付款与唯一的发票进行匹配如果金额相差不到一分钱我们会记录舍入调整并自动关闭发票"
)
ZH_EDIT = ZH.replace("晚上", "夜里").replace("唯一", "单一") + "以上内容仅供参考"
# The same in Thai, written without spaces between words.
TH = (
    "ทุกคืนระบบเรียกเก็บเงินจะส่งออกใบแจ้งหนี้ของวันนั้นและผู้ให้บริการชำระเงินจะส่งไฟล์การชำระบัญชี"
    "การกระทบยอดจะจับคู่การชำระเงินแต่ละรายการกับใบแจ้งหนี้หนึ่งใบตามหมายเลขอ้างอิงจำนวนเงินและสกุลเงิน"
)
TH_EDIT = TH.replace("ทุกคืน", "ทุกเย็น") + "ข้อมูลนี้ใช้เพื่ออ้างอิงเท่านั้น"
OTHER = [
    "ผู้ใช้สามารถเปลี่ยนรหัสผ่านได้จากหน้าการตั้งค่าบัญชีโดยกรอกรหัสผ่านเดิมก่อนแล้วจึงกรอกรหัสผ่านใหม่สองครั้ง",
    "用户可以在账户设置页面修改密码先输入旧密码然后两次输入新密码系统会发送一封确认邮件到注册邮箱",
    "The quick brown fox jumps over the lazy dog while the farmer counts his sheep twice.",
]


def test_char_tokens_are_the_characters_of_the_normalized_text():
    assert char_tokens("Hello,  World!") == list("hello world")
    assert char_tokens("每天晚上。计费") == list("每天晚上 计费")


def test_char_unit_kernel_matches_reference_on_the_pairs():
    texts = [ZH, ZH_EDIT, TH, TH_EDIT, *OTHER, ""]
    flat, offsets = shingle_sets(pa.array(texts, pa.large_string()), 5, "char")
    for i, text in enumerate(texts):
        assert sorted(flat[offsets[i] : offsets[i + 1]].tolist()) == sorted(shingle_set(text, 5, "char"))
    counts, windows, _ = fingerprint_texts(
        pa.array(texts, pa.large_string()), 5, *MinHashParams(8, 1).coefficients(), "char"
    )
    assert counts.tolist() == [len(char_tokens(t)) for t in texts]
    assert windows[-1] == 0


def test_unknown_unit_is_refused():
    with pytest.raises(ValueError, match="shingle_unit must be one of word, char, got 'byte'"):
        shingle_sets(pa.array(["a"], pa.large_string()), 5, "byte")


def test_jaccards_of_the_pairs_by_unit():
    def j(a, b, unit):
        return jaccard(shingle_set(a, 5, unit), shingle_set(b, 5, unit))

    # Chinese: the word unit already shingles ideograph by ideograph, so both units agree
    assert j(ZH, ZH_EDIT, "char") == pytest.approx(j(ZH, ZH_EDIT, "word"))
    assert j(ZH, ZH_EDIT, "char") >= 0.7
    # Thai: a few whitespace-free runs are a few "words"; one edit changes a whole run
    assert len(shingle_set(TH, 5, "word")) == 1  # fewer than 5 tokens: one whole-text shingle
    assert j(TH, TH_EDIT, "word") == 0.0
    assert j(TH, TH_EDIT, "char") >= 0.7


def _run(tmp_path: Path, unit: str, capsys) -> tuple[set[tuple[str, str]], dict]:
    path = tmp_path / "docs.csv"
    rows = [("zh-a", ZH), ("zh-b", ZH_EDIT), ("th-a", TH), ("th-b", TH_EDIT)]
    rows += [(f"other-{i}", text) for i, text in enumerate(OTHER)]
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["doc_id", "source", "domain", "crawled_at", "title", "body"])
        for i, (doc_id, body) in enumerate(rows):
            writer.writerow([doc_id, "test", f"site{i}.example", "2026-03-01", doc_id, body])
    out = tmp_path / unit
    code = main(["run", str(path), "--output", str(out), "--shingle-unit", unit, "--quiet", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    with (out / "duplicate_pairs.csv").open(encoding="utf-8") as f:
        pairs = {(r["left_doc_id"], r["right_doc_id"]) for r in csv.DictReader(f)}
    return pairs, json.loads((out / "manifest.json").read_text())


def test_pipeline_finds_the_thai_pair_only_with_char_and_stores_the_unit(tmp_path, capsys):
    char_pairs, manifest = _run(tmp_path, "char", capsys)
    assert char_pairs == {("th-a", "th-b"), ("zh-a", "zh-b")}
    assert manifest["parameters"]["fingerprinted"]["shingle_unit"] == "char"
    word_pairs, manifest = _run(tmp_path, "word", capsys)
    assert word_pairs == {("zh-a", "zh-b")}  # the Chinese pair: ideographs are word tokens too
    assert manifest["parameters"]["fingerprinted"]["shingle_unit"] == "word"


def test_a_day_fingerprinted_with_another_unit_is_refused(tmp_path):
    from webdedup_assets.engine import DUCKDB, Store, WebdedupError, stage_documents
    from webdedup_assets.params import BandingParams, CandidateParams, FingerprintParams
    from webdedup_assets.storage.store import read_params, write_table

    from .test_partitions import MONTHS, split_fixture_by_day

    store = Store(tmp_path / "store")
    split_fixture_by_day(tmp_path / "crawl")  # the fixture over three crawl months
    stage_documents(store, str(tmp_path / "crawl"), months=MONTHS)
    assert store.partitions("documents") == MONTHS
    DUCKDB.run("fingerprinted", store, FingerprintParams(shingle_unit="char", num_perm=16), months=MONTHS)
    assert store.params("fingerprinted")["fingerprint"]["shingle_unit"] == "char"
    DUCKDB.run("band_memberships", store, BandingParams(bands=4, rows=4), months=MONTHS)
    # one month of the asset fingerprinted with words instead: a store must not mix the two
    files = store.files("fingerprinted")
    assert len(files) > 1
    path = files[0]
    params = read_params(path)
    params["fingerprint"] = {**params["fingerprint"], "shingle_unit": "word"}
    write_table(path, pq.read_table(path), params)
    with pytest.raises(
        WebdedupError, match="was built with fingerprint=.* but candidate_pairs needs fingerprint="
    ) as err:
        DUCKDB.run("candidate_pairs", store, CandidateParams())
    message = str(err.value)
    assert "'shingle_unit': 'char'" in message and "'shingle_unit': 'word'" in message
