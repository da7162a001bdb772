"""Input in object storage: shards in a bucket of a real S3 protocol server on 127.0.0.1 (moto's
standalone server, started and stopped here), read in place through the standard AWS variables.

The same Dolma-style shards in the bucket and on the local disk give the same published results;
a glob, an add and a check read from the bucket too; --emit-shards writes the kept records of
objects; WARC objects, read by ranges, and a Common Crawl targets CSV in the bucket give the
results of the same files on disk; an --output in the bucket is published as one set behind
CURRENT (the files of a local --output; a failed upload leaves CURRENT on the previous set) and
read back by check, inspect and verify; a missing bucket, an empty prefix, an --output in object
storage without a local --storage and credentials the server refuses are each one clear line."""

from __future__ import annotations

import csv
import os
import re
import shutil

import pytest

from webdedup_assets.cli.main import main
from webdedup_assets.storage import objects

from .test_jsonl import DOLMA_FLAGS, SUFFIXES, dolma_record, fixture_rows, write_shard
from .test_warc_fixtures import Rec, corpus, page, truncated_member, write_warc

pytest.importorskip("moto")


def write_crawl(folder) -> list:
    """WARC files of the standard mixed corpus: two .warc.gz (one with a member cut short, one record
    per member) and a plain .warc; the mirror and the revision in other files than the original."""
    recs = corpus()
    folder.mkdir(parents=True)
    names = list(recs)
    revisit = Rec("revisit", recs["original"].url, refers_to=recs["original"].record_id)
    broken = truncated_member(Rec("response", "http://cut.example/", page("Cut", "cut off").encode()))
    write_warc(folder / "a.warc.gz", [Rec("warcinfo", ""), *(recs[k] for k in names[:5])])
    write_warc(folder / "b.warc.gz", [*(recs[k] for k in names[5:9]), revisit, broken])
    write_warc(folder / "c.warc", [recs[k] for k in names[9:]])
    return sorted(folder.iterdir())


@pytest.fixture(scope="module")
def bucket(s3_server, tmp_path_factory):
    """A bucket `corpus` holding the fixture's documents as 8 shards of mixed codecs under
    `shards/`, and the same shards in a local folder; yields (uri, local folder)."""
    import boto3

    local = tmp_path_factory.mktemp("local") / "shards"
    rows = fixture_rows()
    client = boto3.client("s3")
    client.create_bucket(Bucket="corpus")
    for shard, suffix in enumerate(SUFFIXES):
        path = write_shard(
            local / f"shard-{shard:02d}{suffix}", [dolma_record(r) for r in rows[shard :: len(SUFFIXES)]]
        )
        client.put_object(Bucket="corpus", Key=f"shards/{path.name}", Body=path.read_bytes())
    days = sorted({r["crawled_at"] for r in rows})
    for name, part in (("early.jsonl.gz", days[: len(days) // 2]), ("late.json.zst", days[len(days) // 2 :])):
        path = write_shard(local.parent / "by-day" / name, [dolma_record(r) for r in rows if r["crawled_at"] in part])
        client.put_object(Bucket="corpus", Key=f"by-day/{name}", Body=path.read_bytes())
    for path in write_crawl(local.parent / "crawl"):
        client.put_object(Bucket="corpus", Key=f"crawl/{path.name}", Body=path.read_bytes())
    return "s3://corpus/shards", local


@pytest.fixture
def wrong_credentials(bucket, monkeypatch):
    """The server checks credentials for this test (moto's IAM auth, switched on and off again through
    its /moto-api/reset-auth); yields the access key of a user it knows, to be given with a wrong secret."""
    import urllib.request

    import boto3

    iam = boto3.client("iam", region_name="us-east-1")
    iam.create_user(UserName="reader")
    key = iam.create_access_key(UserName="reader")["AccessKey"]["AccessKeyId"]

    def checked_after(count: str) -> None:  # moto skips the check for the first `count` requests
        request = urllib.request.Request(
            f"{os.environ['AWS_ENDPOINT_URL']}/moto-api/reset-auth",
            data=count.encode(),
            method="POST",
            headers={"Content-Type": "text/plain"},
        )
        urllib.request.urlopen(request, timeout=10).close()

    monkeypatch.setattr(objects, "_systems", {})  # file systems made with the credentials of this test
    checked_after("0")
    try:
        yield key
    finally:
        checked_after("inf")
        iam.delete_access_key(UserName="reader", AccessKeyId=key)
        iam.delete_user(UserName="reader")


@pytest.mark.parametrize("who", ["unknown key", "wrong secret"])
def test_wrong_credentials_are_one_line(wrong_credentials, tmp_path, capsys, monkeypatch, who):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIANOTKNOWNHERE0000" if who == "unknown key" else wrong_credentials)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    assert main(["run", "s3://corpus/shards", "--output", str(tmp_path / "out"), "--quiet", *DOLMA_FLAGS]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("webdedup: error: input s3://corpus/shards: access denied"), err[0]
    assert "check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY" in err[0]
    assert not (tmp_path / "out").exists()


def _published(out) -> dict[str, str]:
    return {name: (out / name).read_text() for name in ("duplicate_pairs.csv", "clusters.csv", "removed.csv")}


def test_shards_in_a_bucket_give_the_results_of_the_same_shards_on_disk(bucket, tmp_path):
    uri, local = bucket
    assert main(["run", uri, "--output", str(tmp_path / "remote"), "--quiet", *DOLMA_FLAGS]) == 0
    assert main(["run", str(local), "--output", str(tmp_path / "local"), "--quiet", *DOLMA_FLAGS]) == 0
    assert _published(tmp_path / "remote") == _published(tmp_path / "local")
    with open(tmp_path / "remote" / "duplicate_pairs.csv", newline="") as handle:
        assert len(list(csv.DictReader(handle))) == 18  # the fixture's pinned pairs
    import json

    manifest = json.loads((tmp_path / "remote" / "manifest.json").read_text())
    listed = json.dumps(manifest)
    assert "s3://corpus/shards/shard-00.jsonl" in listed and str(local) not in listed


def test_a_glob_an_add_and_a_check_read_from_the_bucket(bucket, tmp_path, capsys):
    uri, local = bucket
    out = tmp_path / "out"
    # the earlier crawl days, then the later ones (an add brings new days; a held day it holds is replaced)
    assert main(["run", "s3://corpus/by-day/*.gz", "--output", str(out), "--quiet", *DOLMA_FLAGS]) == 0
    assert main(["add", "s3://corpus/by-day/late.json.zst", "--output", str(out), "--quiet", *DOLMA_FLAGS]) == 0
    assert main(["run", str(local), "--output", str(tmp_path / "all"), "--quiet", *DOLMA_FLAGS]) == 0
    assert _published(out) == _published(tmp_path / "all")
    capsys.readouterr()
    code = main(["check", f"{uri}/shard-00.jsonl", "--against", str(out)])  # read with the corpus' mapping
    assert code in (0, 1)
    assert "webdedup check: 3 document(s) of s3://corpus/shards/shard-00.jsonl" in capsys.readouterr().out


WARC_OUTPUTS = (
    "deduped_documents.parquet",
    "clusters.csv",
    "removed.csv",
    "duplicate_pairs.csv",
    "rejected_records.csv",
)


@pytest.mark.parametrize("source", ["s3://corpus/crawl/*.warc*", "s3://corpus/crawl/"])
def test_warc_objects_give_the_results_of_the_same_files_on_disk(bucket, tmp_path, capsys, source):
    crawl = bucket[1].parent / "crawl"
    assert main(["run", source, "--output", str(tmp_path / "remote"), "--quiet"]) == 0
    assert main(["run", str(crawl), "--output", str(tmp_path / "local"), "--quiet"]) == 0
    told = capsys.readouterr().err.splitlines()
    assert told[0].split("; listed in")[0] == told[1].split("; listed in")[0]  # records, documents, rejections
    assert "documents; 8 skipped or rejected" in told[0]
    for name in WARC_OUTPUTS:
        assert (tmp_path / "remote" / name).read_bytes() == (tmp_path / "local" / name).read_bytes(), name
    import json

    manifest = json.loads((tmp_path / "remote" / "manifest.json").read_text())
    listed = [f["path"] for f in manifest["input"]["files"]]
    assert listed == ["s3://corpus/crawl/a.warc.gz", "s3://corpus/crawl/b.warc.gz", "s3://corpus/crawl/c.warc"]


def test_common_crawl_targets_in_a_bucket_give_the_results_of_the_same_csv_on_disk(bucket, tmp_path, capsys):
    import boto3

    from .test_warc_commoncrawl import WARC_PATH, write_targets

    mirror = tmp_path / "mirror"  # a local copy of the crawl's layout, as --cc-base-url accepts
    recs = corpus()
    warc = mirror / WARC_PATH
    warc.parent.mkdir(parents=True)
    spans = write_warc(warc, [recs["original"], recs["request"], recs["mirror"], recs["other"], recs["sjis"]])
    rows = [(WARC_PATH, *span) for span in spans] + [("crawl-data/none.warc.gz", 0, 10)]
    targets = write_targets(tmp_path / "targets.csv", rows)
    boto3.client("s3").put_object(Bucket="corpus", Key="cc/targets.csv", Body=targets.read_bytes())
    flags = ["--format", "commoncrawl", "--cc-base-url", str(mirror), "--accept-commoncrawl-terms", "--quiet"]
    assert main(["run", "s3://corpus/cc/targets.csv", "--output", str(tmp_path / "remote"), *flags]) == 0
    assert main(["run", str(targets), "--output", str(tmp_path / "local"), *flags]) == 0
    told = capsys.readouterr().err.splitlines()
    assert told[0].split("; listed in")[0] == told[1].split("; listed in")[0]
    assert told[0].startswith("webdedup: WARC input: 6 records -> 4 documents; 2 skipped or rejected"), told[0]
    for name in WARC_OUTPUTS:
        assert (tmp_path / "remote" / name).read_bytes() == (tmp_path / "local" / name).read_bytes(), name
    import json

    [entry] = json.loads((tmp_path / "remote" / "manifest.json").read_text())["input"]["files"]
    assert entry["path"] == "s3://corpus/cc/targets.csv" and entry["targets"] == 6
    assert entry["bytes"] == targets.stat().st_size


@pytest.mark.parametrize("name", ["b.warc.gz", "c.warc"])
def test_an_object_read_by_ranges_frames_as_its_file_mapped(bucket, name):
    """Windows far smaller than the records: slices and searches across the seams, re-reads behind."""
    from webdedup_assets.ingest.warc.framing import frame_gzip, frame_plain

    local = bucket[1].parent / "crawl" / name
    framer = frame_gzip if name.endswith(".gz") else frame_plain
    with objects.open_input(objects.ObjectPath.of(f"s3://corpus/crawl/{name}")) as handle:
        remote = objects.RangeBuffer(objects.ObjectPath.of(f"s3://corpus/crawl/{name}"), handle, window=333)
        assert len(remote) == local.stat().st_size
        framed = list(framer(remote, 1 << 20))
    with objects.open_buffer(local) as mapped:
        assert framed == list(framer(mapped, 1 << 20))
    assert len(framed) > 3


def test_emit_shards_writes_the_kept_records_of_objects(bucket, tmp_path):
    uri, local = bucket
    for name, source in (("remote", uri), ("local", str(local))):
        out = tmp_path / name
        assert main(["run", source, "--output", str(out), "--quiet", "--emit-shards", *DOLMA_FLAGS]) == 0
    remote, here = tmp_path / "remote" / "shards", tmp_path / "local" / "shards"
    assert sorted(p.name for p in remote.iterdir()) == sorted(p.name for p in local.iterdir())
    for shard in here.iterdir():
        assert (remote / shard.name).read_bytes() == shard.read_bytes()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["run", "s3://no-such-bucket/shards"],
            "input s3://no-such-bucket/shards: bucket no-such-bucket does not exist",
        ),
        (["run", "s3://corpus/nothing-here"], "input s3://corpus/nothing-here holds no .csv, .parquet, .jsonl"),
        (
            ["run", "s3://corpus/shards", "--storage", "s3://no-such-bucket/st"],
            "storage s3://no-such-bucket/st: bucket no-such-bucket does not exist",
        ),
        (
            ["run", "s3://corpus/shards/no-such-shard.jsonl"],
            "input s3://corpus/shards/no-such-shard.jsonl does not exist",
        ),
        (  # outputs and storage inside the input prefix would be read back by the next run
            ["run", "s3://corpus/shards/", "--output", "s3://corpus/shards/out"],
            "--output s3://corpus/shards/out and the input s3://corpus/shards/ overlap: give --output outside",
        ),
        (
            ["run", "s3://corpus/shards/shard-0[01]*", "--output", "s3://corpus/shards"],
            "--output s3://corpus/shards and the input s3://corpus/shards/shard-0[01]* overlap",
        ),
        (
            ["run", "s3://corpus/shards", "--storage", "s3://corpus/shards/st"],
            "--storage s3://corpus/shards/st and the input s3://corpus/shards overlap",
        ),
    ],
)
def test_object_storage_errors_are_one_line(bucket, tmp_path, capsys, args, message):
    argv = [*args, "--quiet"] if "--output" in args else [*args, "--output", str(tmp_path / "out"), "--quiet"]
    assert main(argv) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"webdedup: error: {message}"), last
    assert "Request ID" not in last and "Traceback" not in last
    assert not (tmp_path / "out").exists()


def test_an_output_in_a_bucket_that_does_not_exist_is_refused_before_any_stage(bucket, tmp_path, capsys):
    uri, _ = bucket
    out = ["--output", "s3://no-such-bucket/out", "--storage", str(tmp_path / "st"), *DOLMA_FLAGS]
    assert main(["run", uri, *out]) == 2
    err = capsys.readouterr().err
    assert err.endswith(
        "webdedup: error: --output s3://no-such-bucket/out: bucket no-such-bucket does not exist (or is not visible "
        "with these credentials)\n"
    )
    assert "documents" not in err  # no stage ran


def _current(prefix: str) -> tuple[str, dict[str, bytes]]:
    """The set CURRENT names under s3://corpus/<prefix> and its files (relative name -> bytes)."""
    import json

    import boto3

    client = boto3.client("s3")
    set_id = json.loads(client.get_object(Bucket="corpus", Key=f"{prefix}/CURRENT")["Body"].read())["set"]
    folder = f"{prefix}/sets/{set_id}/"
    keys = [o["Key"] for o in client.list_objects_v2(Bucket="corpus", Prefix=folder).get("Contents", [])]
    return set_id, {k[len(folder) :]: client.get_object(Bucket="corpus", Key=k)["Body"].read() for k in keys}


def _sets(prefix: str) -> list[str]:
    import boto3

    found = boto3.client("s3").list_objects_v2(Bucket="corpus", Prefix=f"{prefix}/sets/", Delimiter="/")
    return sorted(p["Prefix"].split("/")[-2] for p in found.get("CommonPrefixes", []))


def _comparable(manifest: bytes) -> dict:
    """A manifest without what differs from run to run: times, seconds, the storage root and the
    identities (inode, mtime) of its files."""
    import json

    def kept(value):
        if isinstance(value, dict):
            return {
                k: kept(v) for k, v in value.items() if k not in ("generated_at", "storage_root", "seconds", "sources")
            }
        return [kept(v) for v in value] if isinstance(value, list) else value

    found = kept(json.loads(manifest))
    found.pop("timings_seconds")
    return found


def test_an_output_in_a_bucket_is_published_as_one_set_behind_current(bucket, tmp_path, capsys):
    uri, local = bucket
    common = ["--quiet", "--emit-shards", *DOLMA_FLAGS]
    remote = ["run", str(local), "--output", "s3://corpus/out", "--storage", str(tmp_path / "st"), *common]
    assert main(remote) == 0
    assert main(["run", str(local), "--output", str(tmp_path / "here"), *common]) == 0
    first, published = _current("out")
    here = {p.relative_to(tmp_path / "here").as_posix(): p for p in (tmp_path / "here").rglob("*") if p.is_file()}
    here = {name: path.read_bytes() for name, path in here.items() if not name.startswith(("_storage/", "."))}
    assert sorted(published) == sorted(here)  # deduped_documents, clusters.csv, ..., shards/, manifest.json
    for name, data in here.items():
        if name != "manifest.json":
            assert published[name] == data, name
    assert _comparable(published["manifest.json"]) == _comparable(here["manifest.json"])

    capsys.readouterr()  # readers follow CURRENT to the storage root the set was published from
    check = ["check", f"{uri}/shard-00.jsonl", "--against", "s3://corpus/out", "--report", str(tmp_path / "c.pq")]
    assert main(check) in (0, 1)
    assert f"of the corpus in {tmp_path / 'st'}" in capsys.readouterr().out
    with open(tmp_path / "here" / "clusters.csv", newline="") as handle:
        cluster = next(csv.DictReader(handle))["cluster_id"]
    assert main(["inspect", cluster, "--output", "s3://corpus/out"]) == 0
    assert cluster in capsys.readouterr().out
    assert main(["verify", "--output", "s3://corpus/out"]) == 0  # the current set whole, as its manifest lists it
    assert "webdedup verify: 0 problem(s)" in capsys.readouterr().err

    assert main(remote) == 0  # a second run: a new set, CURRENT moved, the previous set kept
    second, again = _current("out")
    assert second > first and _sets("out") == [first, second]
    assert again["clusters.csv"] == published["clusters.csv"]
    add = ["add", str(local / "shard-00.jsonl"), "--output", "s3://corpus/out", "--storage", str(tmp_path / "st")]
    assert main([*add, "--quiet", *DOLMA_FLAGS]) == 0  # a third publish (an add): the first set is deleted
    third, _ = _current("out")
    assert _sets("out") == [second, third]


def test_a_publish_that_fails_midway_leaves_current_on_the_previous_set(bucket, tmp_path, capsys, monkeypatch):
    from webdedup_assets.storage import sets

    _, local = bucket
    run = ["run", str(local), "--output", "s3://corpus/failing", "--storage", str(tmp_path / "st"), "--quiet"]
    assert main([*run, *DOLMA_FLAGS]) == 0
    before, published = _current("failing")
    real = sets.put_file

    def put_file(source, target):
        if target.name == "removed.csv":
            raise OSError("AWS Error NETWORK_CONNECTION during PutObject operation: connection reset")
        real(source, target)

    monkeypatch.setattr(sets, "put_file", put_file)
    capsys.readouterr()
    assert main([*run, "--threshold", "0.5", *DOLMA_FLAGS]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert any("s3://corpus/failing: publishing failed (AWS Error NETWORK_CONNECTION" in line for line in err), err
    assert "Traceback" not in "\n".join(err)
    assert _current("failing") == (before, published)  # CURRENT and its set as they were
    assert _sets("failing") == [before]  # the partial set deleted
    monkeypatch.setattr(sets, "put_file", real)
    assert main([*run, *DOLMA_FLAGS]) == 0  # the storage was rolled back: the next run is whole again
    assert _current("failing")[1]["clusters.csv"] == published["clusters.csv"]


def _objects(prefix: str) -> dict[str, bytes]:
    import boto3

    client = boto3.client("s3")
    found = client.list_objects_v2(Bucket="corpus", Prefix=f"{prefix}/").get("Contents", [])
    return {o["Key"][len(prefix) + 1 :]: client.get_object(Bucket="corpus", Key=o["Key"])["Body"].read() for o in found}


def test_a_storage_in_a_bucket_runs_and_adds_as_a_local_one_from_any_machine(bucket, tmp_path, capsys, monkeypatch):
    import json

    uri, local = bucket
    monkeypatch.setenv("WEBDEDUP_CACHE", str(tmp_path / "machine-a"))
    out = tmp_path / "out"
    storage = ["--output", str(out), "--storage", "s3://corpus/st", *DOLMA_FLAGS]
    assert main(["run", "s3://corpus/by-day/early.jsonl.gz", *storage, "--quiet"]) == 0
    first = json.loads(_objects("st")["CURRENT"])["set"]
    stored = _objects("st")
    assert f"sets/{first}.json" in stored and any(k.startswith(f"files/{first}/documents/") for k in stored)
    assert json.loads((out / "manifest.json").read_text())["storage_root"] == "s3://corpus/st"

    monkeypatch.setenv("WEBDEDUP_CACHE", str(tmp_path / "machine-b"))  # another machine: downloads the corpus
    shutil.rmtree(tmp_path / "machine-a")  # (not on that machine: its state names the files of machine a)
    capsys.readouterr()
    assert main(["add", "s3://corpus/by-day/late.json.zst", *storage, "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["mode"] == "incremental"  # the downloaded files are recognized
    second = json.loads(_objects("st")["CURRENT"])["set"]
    said = captured.err.strip().splitlines()
    uploaded = said[-1]
    assert [line for line in said if "uploaded" in line] == [uploaded]  # once, for both uploads of the command
    assert re.fullmatch(
        rf"webdedup: s3://corpus/st: uploaded \d+ changed file\(s\), [\d.,]+ MB; CURRENT names set {second}", uploaded
    )
    assert main(["run", str(local), "--output", str(tmp_path / "all"), "--quiet", *DOLMA_FLAGS]) == 0
    assert _published(out) == _published(tmp_path / "all")
    assert second > first
    kept = json.loads(_objects("st")[f"sets/{second}.json"])["files"]
    assert any(e["key"].startswith(f"files/{first}/") for e in kept.values())  # unchanged: not uploaded again
    assert any(e["key"].startswith(f"files/{second}/") for e in kept.values())
    assert sorted(k.split("/")[1] for k in _objects("st") if k.startswith("sets/")) == [
        f"{first}.json",
        f"{second}.json",
    ]

    monkeypatch.setenv("WEBDEDUP_CACHE", str(tmp_path / "machine-a"))  # one set behind: brought up to date
    capsys.readouterr()  # readers follow the output's manifest to the storage
    assert main(["check", f"{uri}/shard-00.jsonl", "--against", str(out), "--report", str(tmp_path / "c.pq")]) in (0, 1)
    assert "webdedup check: 3 document(s)" in capsys.readouterr().out
    assert main(["verify", "--output", str(out)]) == 0
    assert "webdedup verify: 0 problem(s)" in capsys.readouterr().err
    assert json.loads(_objects("st")["CURRENT"])["set"] == second  # readers upload nothing


def test_a_second_writer_of_a_storage_in_a_bucket_is_refused_naming_it(bucket, tmp_path, capsys, monkeypatch):
    import json

    import boto3

    uri, _ = bucket
    monkeypatch.setenv("WEBDEDUP_CACHE", str(tmp_path / "cache"))
    run = ["run", uri, "--output", str(tmp_path / "out"), "--storage", "s3://corpus/held", "--quiet", *DOLMA_FLAGS]
    assert main(run) == 0
    before = _objects("held")
    holder = {"host": "crawler-7", "pid": 4242, "started": "2026-12-06T05:00:00+00:00", "purpose": "webdedup add"}
    client = boto3.client("s3")
    client.put_object(Bucket="corpus", Key="held/writers/20261206T050000000000Z-x.json", Body=json.dumps(holder))
    capsys.readouterr()
    assert main([*run, "--threshold", "0.5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(
        "webdedup: error: s3://corpus/held is in use by another webdedup writer: pid 4242 on crawler-7 since "
        "2026-12-06T05:00:00+00:00 (webdedup add)."
    ), err
    assert "delete s3://corpus/held/writers/20261206T050000000000Z-x.json" in err[-1]
    client.delete_object(Bucket="corpus", Key="held/writers/20261206T050000000000Z-x.json")
    assert _objects("held") == before  # nothing written, own lease given up

    import socket

    dead = {**holder, "host": socket.gethostname(), "pid": 2**22 + 17}  # a lease of this host whose process died
    client.put_object(Bucket="corpus", Key="held/writers/20261206T050000000000Z-y.json", Body=json.dumps(dead))
    assert main([*run, "--threshold", "0.5"]) == 0
    assert not [k for k in _objects("held") if k.startswith("writers/") and not k.endswith("/")]  # (a folder marker)


def test_a_failed_command_leaves_a_storage_in_a_bucket_as_it_was(bucket, tmp_path, capsys, monkeypatch):
    uri, local = bucket
    monkeypatch.setenv("WEBDEDUP_CACHE", str(tmp_path / "cache"))
    common = ["--output", str(tmp_path / "out"), "--storage", "s3://corpus/kept", "--quiet", *DOLMA_FLAGS]
    assert main(["run", uri, *common]) == 0
    before = _objects("kept")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x", "text": "a page"\n')
    capsys.readouterr()
    assert main(["add", str(bad), *common]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: line 1" in err
    assert f"nothing was changed: s3://corpus/kept and {tmp_path / 'out'} are as they were" in err  # not its copy
    assert _objects("kept") == before
    assert main(["run", "s3://corpus/by-day/early.jsonl.gz", *common, "--id-column", "no_such_field"]) == 2
    assert _objects("kept") == before


def test_an_output_in_a_bucket_keeps_its_storage_beside_it(bucket, tmp_path, capsys, monkeypatch):
    import json

    uri, _ = bucket
    monkeypatch.setenv("WEBDEDUP_CACHE", str(tmp_path / "cache"))
    assert main(["run", uri, "--output", "s3://corpus/beside", "--quiet", *DOLMA_FLAGS]) == 0
    stored = _objects("beside")
    assert "_storage/CURRENT" in stored
    assert not [key for key in stored if "/.publish-" in key]  # the outputs staged in the storage: not uploaded
    _, published = _current("beside")
    assert json.loads(published["manifest.json"])["storage_root"] == "s3://corpus/beside/_storage"
    monkeypatch.setenv("WEBDEDUP_CACHE", str(tmp_path / "elsewhere"))  # readers follow the manifest to it
    capsys.readouterr()
    assert main(
        ["check", f"{uri}/shard-00.jsonl", "--against", "s3://corpus/beside", "--report", str(tmp_path / "c.pq")]
    ) in (0, 1)
    assert "webdedup check: 3 document(s)" in capsys.readouterr().out
    with open(tmp_path / "c.pq", "rb") as handle:
        assert handle.read(4) == b"PAR1"


def test_an_add_without_storage_extends_the_storage_the_output_in_a_bucket_was_published_from(
    bucket, tmp_path, capsys, monkeypatch
):
    """An add that forgets --storage extends the corpus published in --output (the storage its
    manifest names), as for a local output: it started a new corpus in OUTPUT/_storage and
    published the added days alone over the whole corpus' results."""
    uri, local = bucket
    monkeypatch.setenv("WEBDEDUP_CACHE", str(tmp_path / "cache"))
    out = ["--output", "s3://corpus/elsewhere-out", "--quiet", *DOLMA_FLAGS]
    assert main(["run", "s3://corpus/by-day/early.jsonl.gz", "--storage", "s3://corpus/elsewhere-st", *out]) == 0
    assert main(["add", "s3://corpus/by-day/late.json.zst", *out]) == 0
    assert not any(k.startswith("_storage/") for k in _objects("elsewhere-out"))
    assert main(["run", str(local), "--output", str(tmp_path / "all"), "--quiet", *DOLMA_FLAGS]) == 0
    _, published = _current("elsewhere-out")
    assert published["clusters.csv"] == (tmp_path / "all" / "clusters.csv").read_bytes()


def test_counts_pinned_beside_an_input_object_are_checked(bucket, tmp_path, capsys, monkeypatch):
    """early.expected.json beside s3://corpus/by-day/early.jsonl.gz pins the run's counts, as beside
    a local file (it was looked up as 's3:/corpus/...', never found, and the check skipped)."""
    import json

    import boto3

    monkeypatch.setenv("WEBDEDUP_CACHE", str(tmp_path / "cache"))
    source = "s3://corpus/by-day/early.jsonl.gz"
    assert main(["run", source, "--output", str(tmp_path / "a"), *DOLMA_FLAGS]) == 0
    said = capsys.readouterr()
    assert "no expectations file s3://corpus/by-day/early.expected.json for this input" in said.out + said.err
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    pinned = {"input_sha256": manifest["input"]["sha256"], "counts": {"documents": manifest["counts"]["documents"] + 1}}
    boto3.client("s3").put_object(Bucket="corpus", Key="by-day/early.expected.json", Body=json.dumps(pinned).encode())
    try:
        assert main(["run", source, "--output", str(tmp_path / "b"), "--quiet", *DOLMA_FLAGS]) == 1
        assert "s3://corpus/by-day/early.expected.json" in capsys.readouterr().err
    finally:
        boto3.client("s3").delete_object(Bucket="corpus", Key="by-day/early.expected.json")


def test_dagster_assets_on_a_storage_in_a_bucket_give_the_results_of_a_local_one(bucket, tmp_path, monkeypatch):
    """The daily assets of the fixture's month, then the global ones, each step on the machine's copy
    of the storage, as the UI's backfill and the sensor's global run do."""
    import json

    import dagster as dg

    from webdedup_assets.defs import DAILY_ASSETS, GLOBAL_ASSETS, build_defs

    from .conftest import job_config
    from .dagster_runs import RANGE_END_TAG, RANGE_START_TAG

    monkeypatch.setenv("WEBDEDUP_CACHE", str(tmp_path / "cache"))
    daily = set(DAILY_ASSETS)
    overall = {a.key.to_user_string() for a in GLOBAL_ASSETS}

    def materialize(storage_root: str, output) -> None:
        defs = build_defs(["2026-03"])
        config = job_config(storage_root, output)
        config["resources"]["storage"]["config"]["ui_previews"] = False
        for names, tags in ((daily, {RANGE_START_TAG: "2026-03", RANGE_END_TAG: "2026-03"}), (overall, None)):
            result = dg.materialize(
                [a for a in defs.assets if a.key.to_user_string() in names],
                run_config={**config, "ops": {k: v for k, v in config["ops"].items() if k in names}},
                resources=defs.resources,
                instance=dg.DagsterInstance.ephemeral(),
                tags=tags,
            )
            assert result.success

    materialize("s3://corpus/dagster", tmp_path / "remote")
    materialize(str(tmp_path / "st"), tmp_path / "local")
    assert _published(tmp_path / "remote") == _published(tmp_path / "local")
    stored = _objects("dagster")
    current = json.loads(stored["CURRENT"])["set"]
    files = json.loads(stored[f"sets/{current}.json"])["files"]
    assert {"documents/part-2026-03.parquet", "clusters/data.parquet", "manifest/manifest.json"} <= set(files)
    assert not [k for k in stored if k.startswith("writers/") and not k.endswith("/")]  # every lease given up


def test_an_upload_that_fails_leaves_current_where_it_was(bucket, tmp_path, capsys, monkeypatch):
    import json

    from webdedup_assets.storage import remote

    uri, _ = bucket
    monkeypatch.setenv("WEBDEDUP_CACHE", str(tmp_path / "cache"))
    common = ["--output", str(tmp_path / "out"), "--storage", "s3://corpus/cut", "--quiet", *DOLMA_FLAGS]
    assert main(["run", uri, *common]) == 0
    before = json.loads(_objects("cut")["CURRENT"])["set"]
    real = remote.put_file

    def put_file(source, target):
        if target.name == "data.parquet" and target.parent.name == "clusters":
            raise OSError("AWS Error NETWORK_CONNECTION during PutObject operation: connection reset")
        real(source, target)

    monkeypatch.setattr(remote, "put_file", put_file)
    capsys.readouterr()
    published = _published(tmp_path / "out")
    assert main(["run", uri, *common, "--threshold", "0.5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        "webdedup: error in manifest: s3://corpus/cut: uploading failed (AWS Error NETWORK_CONNECTION during "
        "PutObject operation: connection reset); s3://corpus/cut/CURRENT still names the corpus as it was before this "
        "command: run the command again"
    ), err
    assert json.loads(_objects("cut")["CURRENT"])["set"] == before
    assert _published(tmp_path / "out") == published  # the storage is uploaded before the outputs are swapped in
    monkeypatch.setattr(remote, "put_file", real)
    assert main(["run", uri, *common, "--threshold", "0.5"]) == 0  # the copy is brought back to CURRENT first
    assert json.loads(_objects("cut")["CURRENT"])["set"] > before
    assert not [k for k in _objects("cut") if k.startswith("writers/") and not k.endswith("/")]


def test_undo_links_a_killed_command_left_in_the_copy_give_way_to_the_storage_in_the_bucket(
    bucket, tmp_path, monkeypatch
):
    """A command killed on this machine leaves its undo links in the copy; the set CURRENT names is
    what the storage holds, so they are dropped, not restored over it by the next command."""
    from webdedup_assets.storage.objects import ObjectPath
    from webdedup_assets.storage.remote import cache_folder

    uri, local = bucket
    monkeypatch.setenv("WEBDEDUP_CACHE", str(tmp_path / "cache"))
    common = ["--output", str(tmp_path / "out"), "--storage", "s3://corpus/undo", "--quiet", *DOLMA_FLAGS]
    assert main(["run", "s3://corpus/by-day/early.jsonl.gz", *common]) == 0
    links = cache_folder(ObjectPath.of("s3://corpus/undo")) / ".rollback"
    (links / "clusters").mkdir(parents=True)
    (links / "clusters" / "data.parquet").write_bytes(b"not what the storage holds")
    (links / "COMPLETE").touch()
    assert main(["add", "s3://corpus/by-day/late.json.zst", *common]) == 0
    assert main(["run", str(local), "--output", str(tmp_path / "all"), "--quiet", *DOLMA_FLAGS]) == 0
    assert _published(tmp_path / "out") == _published(tmp_path / "all")


def test_a_command_stopped_before_the_outputs_current_moved_leaves_the_storage_ahead(bucket, tmp_path, monkeypatch):
    """Storage and output in the bucket: the storage is uploaded before the output's CURRENT moves,
    so an add stopped in between (Ctrl-C) loses nothing: the next add publishes every day."""
    import json

    from webdedup_assets.storage import sets

    def current(prefix: str) -> str:
        return json.loads(_objects(prefix)["CURRENT"])["set"]

    monkeypatch.setenv("WEBDEDUP_CACHE", str(tmp_path / "cache"))
    common = ["--output", "s3://corpus/both", "--quiet", *DOLMA_FLAGS]
    assert main(["run", "s3://corpus/by-day/early.jsonl.gz", *common]) == 0
    output_before, storage_before = current("both"), current("both/_storage")
    real = sets.point_to

    def stopped(output, set_id):
        raise KeyboardInterrupt

    monkeypatch.setattr(sets, "point_to", stopped)
    with pytest.raises(KeyboardInterrupt):
        main(["add", "s3://corpus/by-day/late.json.zst", *common])
    monkeypatch.setattr(sets, "point_to", real)
    assert current("both") == output_before
    left = [k for k in _objects("both") if k.startswith("sets/") and k != "sets/"]  # (pyarrow keeps a folder marker)
    assert {k.split("/")[1] for k in left} == {output_before}, left  # no partial set
    assert current("both/_storage") != storage_before  # the storage is ahead of the output, never behind
    assert main(["add", "s3://corpus/by-day/late.json.zst", *common]) == 0
    assert main(["run", str(bucket[1]), "--output", str(tmp_path / "all"), "--quiet", *DOLMA_FLAGS]) == 0
    published = json.loads(_objects(f"both/sets/{current('both')}")["manifest.json"])
    assert published["counts"] == json.loads((tmp_path / "all" / "manifest.json").read_text())["counts"]


def test_files_of_sets_no_longer_kept_go_whole_with_no_folder_markers_left(bucket, tmp_path, monkeypatch):
    """After each upload only the current and the previous set are kept; a set none of whose files
    is kept is deleted as one folder, so no empty folder markers pile up in the bucket."""
    import json

    uri, _ = bucket
    monkeypatch.setenv("WEBDEDUP_CACHE", str(tmp_path / "cache"))
    common = ["--output", str(tmp_path / "out"), "--storage", "s3://corpus/tidy", "--quiet", *DOLMA_FLAGS]
    assert main(["run", "s3://corpus/by-day/early.jsonl.gz", *common]) == 0
    for threshold in ("0.5", "0.6", "0.8"):  # every global stage written again: sets of their own
        assert main(["run", "s3://corpus/by-day/early.jsonl.gz", *common, "--threshold", threshold]) == 0
    stored = _objects("tidy")
    kept = {
        k.split("/")[1]
        for s in stored
        if s.startswith("sets/") and s.endswith(".json")
        for k in (e["key"] for e in json.loads(stored[s])["files"].values())
    }
    in_files = {k.split("/")[1] for k in stored if k.startswith("files/") and k != "files/"}
    assert in_files == kept
    assert not [k for k in stored if k.startswith("files/") and k.endswith("/") and k != "files/"]
