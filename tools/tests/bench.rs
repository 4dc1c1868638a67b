//! End-to-end tests of `bloomkv bench`: run the built binary on small datasets and check the
//! JSON and SVG it writes. Throughput is only checked to be positive: timings on a shared
//! machine prove nothing, but block counts and false-positive rates are deterministic enough
//! to test.

use assert_cmd::Command;
use bloomkv::Readable;
use serde_json::Value;

const WORKLOADS: [&str; 11] = [
    "fillrandom",
    "fillseq",
    "readrandom",
    "readmissing",
    "multireadrandom",
    "multireadmissing",
    "readzipfian",
    "seekrandom",
    "readwhilewriting",
    "ycsb-a",
    "ycsb-b",
];
const POLICIES: [&str; 6] = ["blocked", "budgeted", "classic", "ribbon", "budgeted-ribbon", "none"];

fn row<'a>(results: &'a [Value], workload: &str, policy: &str) -> &'a Value {
    results
        .iter()
        .find(|r| r["workload"] == workload && r["policy"] == policy)
        .unwrap_or_else(|| panic!("no result for {workload} × {policy}"))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn full_run_writes_sane_json_and_svg() {
    let dir = tempfile::tempdir().unwrap();
    Command::cargo_bin("bloomkv")
        .unwrap()
        .current_dir(dir.path())
        .args(["bench", "--keys", "20000", "--reads", "5000", "--sweep", "4,10"])
        .args(["--json", "out.json", "--plot", "out.svg", "--quiet"])
        .assert()
        .success()
        .stdout(predicates::str::contains("no filter:"))
        .stdout(predicates::str::contains("blocked:"));

    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("out.json")).unwrap())
            .unwrap();
    assert_eq!(json["schema"], "bloomkv-bench/1");
    assert_eq!(json["config"]["keys"], 20000);
    let results = json["results"].as_array().unwrap();
    assert_eq!(results.len(), WORKLOADS.len() * POLICIES.len());
    // One round by default: a round row for each read-only workload × policy.
    let rounds = json["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 6 * POLICIES.len());
    assert!(rounds.iter().all(|r| r["round"] == 0));
    for w in WORKLOADS {
        for p in POLICIES {
            let r = row(results, w, p);
            assert!(f(&r["ops_per_sec"]) > 0.0, "{w} {p}");
            assert!(f(&r["ops_per_cpu_sec"]) > 0.0, "{w} {p}");
            assert!(r["ops"].as_u64().unwrap() > 0);
            let l = &r["latency_ns"];
            let (p50, p99, p999, max) = (f(&l["p50"]), f(&l["p99"]), f(&l["p999"]), f(&l["max"]));
            assert!(0.0 < p50 && p50 <= p99 && p99 <= p999 && p999 <= max, "{w} {p}: {l}");
            assert!(!r["latency_percentiles"].as_array().unwrap().is_empty());
            for field in ["blocks_read", "cache_hits", "blocks_touched", "tables_consulted"] {
                assert!(f(&r["per_op"][field]) >= 0.0, "{w} {p} {field}");
            }
            assert!(!r["tables_per_level"].as_array().unwrap().is_empty());
            if cfg!(target_os = "linux") {
                assert!(r["minor_faults"].as_u64().is_some(), "{w} {p}: {}", r["minor_faults"]);
                assert!(r["major_faults"].as_u64().is_some(), "{w} {p}");
                assert!(f(&r["steal_seconds"]) >= 0.0, "{w} {p}");
            }
        }
    }
    if cfg!(target_os = "linux") {
        assert!(rounds.iter().all(|r| r["minor_faults"].as_u64().is_some()));
    }

    // Point-read workloads move the block counters; a missing key is read once per table
    // without a filter, and almost never with one.
    let blocked = row(results, "readmissing", "blocked");
    let budgeted = row(results, "readmissing", "budgeted");
    let classic = row(results, "readmissing", "classic");
    let none = row(results, "readmissing", "none");
    let tables = f(&none["per_op"]["tables_consulted"]);
    assert!(tables >= 1.0, "every missing key falls inside at least one table: {tables}");
    assert!(f(&none["per_op"]["blocks_touched"]) > 0.9 * tables);
    assert!(f(&none["per_op"]["blocks_touched"]) > 10.0 * f(&blocked["per_op"]["blocks_touched"]));
    assert_eq!(f(&none["per_op"]["tables_skipped"]), 0.0);
    for r in [blocked, classic] {
        let fpr = f(&r["measured_fpr"]);
        assert!(fpr < 0.05, "measured FPR {fpr} at 10 bits/key");
        assert!((0.005..0.011).contains(&f(&r["expected_fpr"])));
        assert!(f(&r["filter_memory_bytes"]) > 0.0);
    }
    assert_eq!(f(&none["measured_fpr"]), 1.0);
    assert_eq!(f(&none["filter_memory_bytes"]), 0.0);
    // multi_get: ops count keys (whole calls of 32), and the engine's counters per key are
    // the single-key workload's on the same tree.
    for p in POLICIES {
        let (single, multi) = (row(results, "readmissing", p), row(results, "multireadmissing", p));
        assert_eq!(multi["batch"], 32);
        assert!(single["batch"].is_null());
        assert_eq!(multi["ops"].as_u64().unwrap() % 32, 0);
        assert!(multi["ops"].as_u64().unwrap() >= 5000);
        let per = |r: &Value, k: &str| f(&r["per_op"][k]);
        // (Different random keys: L0 tables cover slightly different shares of each draw.)
        let (a, b) = (per(multi, "tables_consulted"), per(single, "tables_consulted"));
        assert!((a - b).abs() < 0.02 * b, "{p}: tables consulted {a} vs {b}");
        // Without a filter every table is searched, and keys of one call that share a block
        // fetch it once; with one, the few false positives rarely share.
        let (a, b) = (per(multi, "blocks_touched"), per(single, "blocks_touched"));
        if p == "none" {
            assert!(a < b, "{p}: blocks/lookup {a} vs {b}");
        } else {
            assert!((a - b).abs() <= 0.2 * b + 0.01, "{p}: blocks/lookup {a} vs {b}");
        }
        assert_eq!(row(results, "multireadrandom", p)["batch"], 32);
    }
    // The budget's split: far fewer blocks per missing key than uniform bits at the same
    // average, with a little more memory here — the small L0 tables got their shares while the
    // level below them keeps what it was given when it was the only run.
    let blocks = |r: &Value| f(&r["per_op"]["blocks_touched"]);
    assert!(blocks(budgeted) < 0.6 * blocks(blocked), "{budgeted}");
    let memory = |r: &Value| f(&r["filter_memory_bytes"]);
    assert!(
        memory(budgeted) < 1.2 * memory(blocked),
        "{} vs {}",
        memory(budgeted),
        memory(blocked)
    );
    assert!(f(&budgeted["measured_fpr"]) < 0.6 * f(&blocked["measured_fpr"]));
    assert!(row(results, "readrandom", "blocked")["measured_fpr"].is_number());
    assert!(row(results, "fillrandom", "blocked")["measured_fpr"].is_null());
    assert!(row(results, "readwhilewriting", "none")["writer_ops"].as_u64().unwrap() > 0);

    let preds = json["predictions"].as_array().unwrap();
    assert_eq!(preds.len(), POLICIES.len());
    for p in preds {
        let (read, predicted) = (f(&p["blocks_per_lookup"]), f(&p["predicted_blocks_per_lookup"]));
        // About 70–180 false positives per Bloom policy here, fewer for Ribbon (2^-9 per
        // table): 30%, or four standard deviations of the count where that is more.
        let expected_count = predicted * 5000.0;
        let noise = 4.0 * expected_count.sqrt() / 5000.0;
        assert!((read - predicted).abs() < noise.max(0.3 * predicted), "{p}");
        assert_eq!(
            p["filter_memory_bytes"],
            row(results, "readmissing", p["policy"].as_str().unwrap())["filter_memory_bytes"]
        );
    }
    // Each table's own rate, not the policy's nominal one: the budgeted tree's prediction is
    // far below what 10 bits per key in every table would give.
    let pred = |name: &str| preds.iter().find(|p| p["policy"] == name).unwrap();
    let predicted = |name: &str| f(&pred(name)["predicted_blocks_per_lookup"]);
    assert!(predicted("budgeted") < 0.6 * predicted("blocked"));
    assert!(predicted("budgeted-ribbon") < predicted("budgeted"));
    assert!(f(&pred("budgeted")["filter_bits_per_key"]) > 10.0);

    // The layered shape depends only on the data: the same tree for every policy, with L0
    // one table short of the compaction trigger (4 by default) above the compacted data.
    let shapes = json["shapes"].as_array().unwrap();
    assert_eq!(shapes.len(), POLICIES.len());
    let levels = &shapes[0]["tables_per_level"];
    assert_eq!(levels[0], 3, "{levels}");
    for s in shapes {
        assert_eq!(&s["tables_per_level"], levels, "shapes differ: {shapes:?}");
    }
    // Where the bits went: uniform everywhere for blocked, more on L0 under the budget.
    let per_level = |name: &str| -> Vec<f64> {
        let s = shapes.iter().find(|s| s["policy"] == name).unwrap();
        s["filter_bits_per_key_per_level"].as_array().unwrap().iter().map(f).collect()
    };
    let (uniform, split) = (per_level("blocked"), per_level("budgeted"));
    assert!((uniform[0] - uniform[1]).abs() < 0.5, "{uniform:?}");
    assert!(split[0] > split[1] + 3.0, "{split:?}");
    // Ribbon below L0; the flushes' blocked Bloom filters need more bits for the same rate.
    let ribbon = per_level("ribbon");
    assert!(ribbon[0] > ribbon[1] + 2.0 && ribbon[1] < 10.0, "{ribbon:?}");
    assert_eq!(f(&none["per_op"]["tables_consulted"]), f(&blocked["per_op"]["tables_consulted"]));

    // The sweep: every filtered policy at 4 and 10 bits/key, theory falling with bits/key,
    // measurement following it.
    let sweep = json["sweep"].as_array().unwrap();
    assert_eq!(sweep.len(), 10);
    for p in ["blocked", "budgeted", "classic", "ribbon", "budgeted-ribbon"] {
        let rows: Vec<&Value> = sweep.iter().filter(|r| r["policy"] == p).collect();
        assert_eq!(rows.len(), 2);
        assert_eq!(f(&rows[0]["bits_per_key"]), 4.0);
        assert_eq!(f(&rows[1]["bits_per_key"]), 10.0);
        assert!(f(&rows[0]["expected_fpr"]) > f(&rows[1]["expected_fpr"]));
        assert!(f(&rows[0]["measured_fpr"]) > f(&rows[1]["measured_fpr"]));
        assert!(f(&rows[0]["filter_memory_bytes"]) < f(&rows[1]["filter_memory_bytes"]));
        for r in rows {
            assert!(f(&r["readmissing_ops_per_sec"]) > 0.0);
            assert!((f(&r["measured_fpr"]) - f(&r["expected_fpr"])).abs() < 0.05);
            // A Ribbon filter takes at most about the bits asked for: ⌊4 / 1.05⌋ = 3 bits per
            // slot, 3.15 per key.
            let least = if p.contains("ribbon") { 3.1 } else { 3.9 };
            assert!(f(&r["predicted_blocks_per_op"]) > 0.0 && f(&r["filter_bits_per_key"]) > least);
        }
    }
    // Side by side at the same average bits per key, the budget reads fewer blocks.
    let sweep_blocks = |p: &str, bpk: f64| {
        let r = sweep.iter().find(|r| r["policy"] == p && f(&r["bits_per_key"]) == bpk).unwrap();
        f(&r["blocks_per_op"])
    };
    for bpk in [4.0, 10.0] {
        assert!(sweep_blocks("budgeted", bpk) < 0.75 * sweep_blocks("blocked", bpk), "{bpk}");
    }
    // And a Ribbon filter at 10 bits per key (9 fingerprint bits, 2^-9) misses far less often
    // than a blocked Bloom filter (about 1%).
    let sweep_fpr = |p: &str| {
        let r = sweep.iter().find(|r| r["policy"] == p && f(&r["bits_per_key"]) == 10.0).unwrap();
        f(&r["measured_fpr"])
    };
    assert!(sweep_fpr("ribbon") < 0.5 * sweep_fpr("blocked"));

    let svg = std::fs::read_to_string(dir.path().join("out.svg")).unwrap();
    assert!(svg.starts_with("<svg") || svg.starts_with("<?xml"), "{}", &svg[..50]);
    assert!(svg.len() > 10_000, "{} bytes", svg.len());
    for p in POLICIES {
        assert!(svg.contains(p), "SVG lacks {p}");
    }
    assert!(svg.contains("readmissing") && svg.contains("false-positive rate"));
}

#[test]
fn subsets_run_only_what_was_asked_and_keep_dir() {
    let dir = tempfile::tempdir().unwrap();
    let dbs = dir.path().join("dbs");
    Command::cargo_bin("bloomkv")
        .unwrap()
        .current_dir(dir.path())
        .args(["bench", "--keys", "3000", "--reads", "1000", "--sweep", "none", "--quiet"])
        .args(["--workloads", "readmissing", "--policies", "none,blocked", "--threads", "2"])
        .args(["--compression", "zstd:1", "--shape", "as-filled", "--page-cache", "warm"])
        .args(["--json", "out.json", "--dir"])
        .arg(&dbs)
        .assert()
        .success();
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("out.json")).unwrap())
            .unwrap();
    let results = json["results"].as_array().unwrap();
    let names: Vec<(&str, &str)> = results
        .iter()
        .map(|r| (r["workload"].as_str().unwrap(), r["policy"].as_str().unwrap()))
        .collect();
    assert_eq!(names, [("readmissing", "blocked"), ("readmissing", "none")]);
    assert_eq!(results[0]["threads"], 2);
    assert_eq!(json["config"]["compression"], "zstd:1");
    assert_eq!(json["config"]["shape"], "as-filled");
    assert_eq!(json["config"]["page_cache"], "warm");
    assert!(json["sweep"].as_array().unwrap().is_empty());
    assert!(dbs.join("fillrandom-blocked").is_dir(), "--dir keeps the databases");
    assert!(dbs.join("fillrandom-none").is_dir());

    // The kept databases make the directory non-empty: a second run must refuse it rather
    // than mix old and new data.
    Command::cargo_bin("bloomkv")
        .unwrap()
        .args(["bench", "--keys", "100", "--quiet", "--dir"])
        .arg(&dbs)
        .assert()
        .failure()
        .stderr(predicates::str::contains("not empty"));
}

#[test]
fn bad_arguments_are_refused() {
    Command::cargo_bin("bloomkv")
        .unwrap()
        .args(["bench", "--compression", "lz4"])
        .assert()
        .failure()
        .stderr(predicates::str::contains("zstd"));
    Command::cargo_bin("bloomkv")
        .unwrap()
        .args(["bench", "--workloads", "readsomething"])
        .assert()
        .failure();
    Command::cargo_bin("bloomkv").unwrap().args(["bench", "--sweep", "4,x"]).assert().failure();
    Command::cargo_bin("bloomkv").unwrap().args(["bench", "--rounds", "0"]).assert().failure();
    // A budget's average is capped below the uniform filters' limit.
    Command::cargo_bin("bloomkv")
        .unwrap()
        .args(["bench", "--keys", "100", "--sweep", "40", "--policies", "budgeted"])
        .assert()
        .failure()
        .stderr(predicates::str::contains("budgeted filter bits per key"));
}

/// `--rounds 3`: each read-only workload runs three times on every policy's database, all
/// built first; the results row is the median round, a workload that writes runs once, and
/// the text compares each round's policies with `classic`.
#[test]
fn rounds_repeat_the_reads_and_report_the_median() {
    let dir = tempfile::tempdir().unwrap();
    let dbs = dir.path().join("dbs");
    Command::cargo_bin("bloomkv")
        .unwrap()
        .current_dir(dir.path())
        .args(["bench", "--keys", "5000", "--reads", "2000", "--sweep", "none", "--rounds", "3"])
        .args(["--policies", "blocked,classic", "--workloads", "readmissing,readrandom,ycsb-b"])
        .args(["--json", "out.json", "--plot", "out.svg", "--quiet", "--page-cache", "cold"])
        .arg("--dir")
        .arg(&dbs)
        .assert()
        .success()
        .stdout(predicates::str::contains("page cache cold"))
        .stdout(predicates::str::contains("rounds: ops/s in each of 3 rounds"))
        .stdout(predicates::str::contains("blocked / classic"));
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("out.json")).unwrap())
            .unwrap();
    assert_eq!(json["config"]["rounds"], 3);
    assert_eq!(json["config"]["page_cache"], "cold");
    // Cold empties the block cache too: every round, the median one included, reads its
    // present keys' blocks afresh (about 170 of them for 2,000 reads), although the whole
    // 5,000-key tree fits in the block cache, so a round after a warm one would read none.
    for p in ["blocked", "classic"] {
        let per_op = &row(json["results"].as_array().unwrap(), "readrandom", p)["per_op"];
        assert!(f(&per_op["blocks_read"]) > 0.04, "{p}: {per_op}");
    }
    let results = json["results"].as_array().unwrap();
    assert_eq!(results.len(), 3 * 2, "one row per workload × policy");
    let rounds = json["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 3 * 2 * 2, "the read-only workloads, three times each");
    assert!(!rounds.iter().any(|r| r["workload"] == "ycsb-b"), "a writer runs once");
    for w in ["readmissing", "readrandom"] {
        for p in ["blocked", "classic"] {
            let mut ops: Vec<(u64, f64)> = rounds
                .iter()
                .filter(|r| r["workload"] == w && r["policy"] == p)
                .map(|r| (r["round"].as_u64().unwrap(), f(&r["ops_per_sec"])))
                .collect();
            ops.sort_by_key(|&(round, _)| round);
            assert_eq!(ops.iter().map(|&(r, _)| r).collect::<Vec<_>>(), [0, 1, 2], "{w} {p}");
            let mut xs: Vec<f64> = ops.iter().map(|&(_, x)| x).collect();
            xs.sort_by(f64::total_cmp);
            assert_eq!(f(&row(results, w, p)["ops_per_sec"]), xs[1], "{w} {p}: the median round");
        }
    }
    let svg = std::fs::read_to_string(dir.path().join("out.svg")).unwrap();
    assert!(svg.contains("median of 3 rounds"), "the plot says its bars are medians");
    assert!(svg.contains("page cache cold"), "the plot's title names the page-cache state");
    // Every check of every read passed in every round, on databases that stay on disk
    // side by side.
    assert!(dbs.join("fillrandom-blocked").is_dir() && dbs.join("fillrandom-classic").is_dir());
}

fn run_json(dir: &std::path::Path, args: &[&str]) -> Value {
    Command::cargo_bin("bloomkv")
        .unwrap()
        .current_dir(dir)
        .arg("bench")
        .args(args)
        .args(["--json", "out.json", "--quiet"])
        .assert()
        .success();
    serde_json::from_str(&std::fs::read_to_string(dir.join("out.json")).unwrap()).unwrap()
}

fn scan(path: &std::path::Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    let db = bloomkv::Db::open_read_only(path, bloomkv::Options::default()).unwrap();
    db.range(..).map(|r| r.map(|(k, v)| (k, v.to_vec()))).collect::<Result<_, _>>().unwrap()
}

/// `--load ingest` builds each database with one `Db::ingest` of the data the fill writes:
/// the same keys and values, the same layered tree for the reads, and every read check
/// passes; `fillrandom`, asked for, runs on a database of its own.
#[test]
fn ingest_load_gives_the_reads_the_same_data_and_tree_as_the_fill() {
    let dir = tempfile::tempdir().unwrap();
    let common = ["--keys", "20000", "--reads", "3000", "--sweep", "4,10", "--policies"];
    let workloads = "fillrandom,readrandom,readmissing,seekrandom";
    let fill_dbs = dir.path().join("fill");
    let fill = run_json(
        dir.path(),
        &[
            &common[..],
            &["blocked,none", "--workloads", workloads, "--dir", fill_dbs.to_str().unwrap()],
        ]
        .concat(),
    );
    let ingest_dbs = dir.path().join("ingest");
    let ingest = run_json(
        dir.path(),
        &[
            &common[..],
            &["blocked,none", "--workloads", workloads, "--load", "ingest", "--plot", "out.svg"],
            &["--dir", ingest_dbs.to_str().unwrap()],
        ]
        .concat(),
    );
    assert_eq!(fill["config"]["load"], "fill");
    assert_eq!(ingest["config"]["load"], "ingest");
    for p in ["blocked", "none"] {
        let path = |base: &std::path::Path, load: &str| base.join(format!("{load}-{p}"));
        let data = scan(&path(&ingest_dbs, "ingest"));
        assert_eq!(data.len(), 20000);
        assert!(data == scan(&path(&fill_dbs, "fillrandom")), "{p}: different data");
    }
    let (fs, is) = (fill["shapes"].as_array().unwrap(), ingest["shapes"].as_array().unwrap());
    assert_eq!(fs.len(), 2);
    for (f_shape, i_shape) in fs.iter().zip(is) {
        assert_eq!(i_shape["load"], "ingest");
        assert!(f(&i_shape["load_seconds"]) > 0.0 && f(&i_shape["load_mib_per_sec"]) > 0.0);
        assert_eq!(i_shape["load_bytes"], 20000 * 116);
        // Each byte written once into a table (filters and indexes add a little).
        assert!(f(&i_shape["write_amplification"]) < 1.2, "{i_shape}");
        // Three L0 tables over one sorted level, whichever way the data came.
        let levels = |s: &Value| -> Vec<u64> {
            s["tables_per_level"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect()
        };
        let (fl, il) = (levels(f_shape), levels(i_shape));
        assert_eq!((fl[0], il[0]), (3, 3));
        assert_eq!(fl[1..].iter().filter(|&&n| n > 0).count(), 1, "{fl:?}");
        assert_eq!(il[1..].iter().filter(|&&n| n > 0).count(), 1, "{il:?}");
    }
    let (fr, ir) = (fill["results"].as_array().unwrap(), ingest["results"].as_array().unwrap());
    assert_eq!(fr.len(), ir.len());
    for p in ["blocked", "none"] {
        assert_eq!(row(ir, "fillrandom", p)["ops"], 20000);
        let (a, b) = (row(fr, "readmissing", p), row(ir, "readmissing", p));
        assert_eq!(f(&a["per_op"]["tables_consulted"]), f(&b["per_op"]["tables_consulted"]));
    }
    assert!(f(&row(ir, "readmissing", "blocked")["measured_fpr"]) < 0.05);
    assert_eq!(ingest["sweep"].as_array().unwrap().len(), 2, "blocked at 4 and 10 bits/key");
    let svg = std::fs::read_to_string(dir.path().join("out.svg")).unwrap();
    assert!(svg.contains("by ingest") && svg.contains("readmissing"));
}

/// `--profile large` presets keys, load, workloads, a warm page cache and a capped sweep;
/// explicit flags win.
#[test]
fn the_large_profile_sets_defaults_that_flags_override() {
    let dir = tempfile::tempdir().unwrap();
    let small = ["--keys", "16000", "--reads", "1000", "--sweep", "10"];
    let json = run_json(dir.path(), &[&["--profile", "large"][..], &small[..]].concat());
    let c = &json["config"];
    assert_eq!(c["profile"], "large");
    assert_eq!(c["keys"], 16000);
    assert_eq!(c["load"], "ingest");
    assert_eq!(c["page_cache"], "warm");
    let large = ["readrandom", "readmissing", "multireadrandom", "multireadmissing"];
    assert_eq!(c["workloads"], serde_json::json!(large));
    assert_eq!(c["policies"], serde_json::json!(POLICIES));
    assert_eq!(c["sweep_keys"], 2000, "an eighth of the keys, at most 1M");
    let results = json["results"].as_array().unwrap();
    assert_eq!(results.len(), large.len() * POLICIES.len());
    for w in large {
        for p in POLICIES {
            assert!(f(&row(results, w, p)["ops_per_sec"]) > 0.0);
        }
    }
    let overridden = ["--profile", "large", "--load", "fill", "--page-cache", "as-is"];
    let overridden = [&overridden[..], &small[..]].concat();
    let overridden =
        [&overridden[..], &["--workloads", "readmissing", "--sweep-keys", "500"]].concat();
    let c = run_json(dir.path(), &overridden)["config"].clone();
    assert_eq!((c["load"].as_str(), c["sweep_keys"].as_u64()), (Some("fill"), Some(500)));
    assert_eq!(c["page_cache"], "as-is");
    assert_eq!(c["workloads"], serde_json::json!(["readmissing"]));
    assert_eq!(c["keys"], 16000);
}

/// `bloomkv bench ... | head -1`: the reader leaves after the first line; the run still
/// finishes cleanly, writes its JSON and exits 0 instead of panicking on the closed pipe.
#[test]
fn a_reader_that_leaves_early_does_not_fail_the_run() {
    use std::io::BufRead;
    use std::process::{Command as Std, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let mut child = Std::new(env!("CARGO_BIN_EXE_bloomkv"))
        .args(["bench", "--keys", "4000", "--reads", "500", "--sweep", "none", "--quiet"])
        .args(["--workloads", "readmissing", "--policies", "blocked", "--json"])
        .arg(&json)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert!(first.starts_with("bloomkv bench"), "{first}");
    // The reader is dropped here: every later write meets a closed pipe.
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(json.exists());
}

/// The writer workloads run on fresh databases of their own, with the threads asked for, and
/// report what the fill's row reports: the writes, the background work per level and the
/// tables they left.
#[test]
fn writers_run_on_their_own_databases_and_report_the_write_path() {
    let dir = tempfile::tempdir().unwrap();
    let json = run_json(
        dir.path(),
        &[
            "--keys",
            "30000",
            "--workloads",
            "writers,writers-synced",
            "--policies",
            "blocked",
            "--threads",
            "3",
            "--writes",
            "30000",
            "--synced-writes",
            "300",
            "--sweep",
            "none",
            "--memtable-bytes",
            "262144",
        ],
    );
    let results = json["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "{results:?}");
    for (w, ops) in [("writers", 30000), ("writers-synced", 300)] {
        let r = row(results, w, "blocked");
        assert_eq!(r["ops"], ops);
        assert_eq!(r["threads"], 3);
        assert!(f(&r["ops_per_sec"]) > 0.0);
        assert!(
            r["latency_ns"]["p99"].as_u64().unwrap() >= r["latency_ns"]["p50"].as_u64().unwrap()
        );
    }
    // 30,000 entries of about 130 bytes fill 256 KiB memtables many times over: the unsynced
    // run flushed, and its row says what that wrote where.
    let r = row(results, "writers", "blocked");
    let levels = r["level_work"].as_array().unwrap();
    assert_eq!(levels[0]["level"], 0);
    assert!(levels[0]["runs"].as_u64().unwrap() >= 5, "{levels:?}");
    // What the last memtable holds is not in a table yet: the figure can be a little below 1.
    assert!(f(&r["write_amplification"]) > 0.5, "{r}");
    let tables: u64 =
        r["tables_after"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).sum();
    assert!(tables >= 1);
}

/// `compact` times one `Db::compact()` of four overlapping ingests: every key is an op, the
/// compaction's work shows per level, and what is left is one level.
#[test]
fn compact_merges_the_interleaved_runs_into_one_level() {
    let dir = tempfile::tempdir().unwrap();
    let json = run_json(
        dir.path(),
        &["--keys", "20000", "--workloads", "compact", "--policies", "blocked", "--sweep", "none"],
    );
    let results = json["results"].as_array().unwrap();
    assert_eq!(results.len(), 1, "{results:?}");
    let r = row(results, "compact", "blocked");
    assert_eq!(r["ops"], 20000);
    assert!(f(&r["ops_per_sec"]) > 0.0);
    let written: u64 = r["level_work"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["bytes_written"].as_u64().unwrap())
        .sum();
    // Each key of about 120 bytes is written at least once.
    assert!(written >= 20000 * 116, "{r}");
    let tables: Vec<u64> =
        r["tables_after"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect();
    assert_eq!(tables.iter().filter(|&&t| t > 0).count(), 1, "{tables:?}");
}

/// The prefix workloads, asked for by name: they bring the prefix key layout (10 keys per
/// prefix) and every filtered policy with and without prefix filters. An absent-prefix scan
/// with prefix filters reads about `tables in range × FPR` tables and skips the rest, and
/// the measured prefix rate is near the filters' own; without them it reads every table in
/// range. The point workloads run on the same trees.
#[test]
fn prefix_workloads_skip_tables_by_prefix_filter() {
    let dir = tempfile::tempdir().unwrap();
    let json = run_json(
        dir.path(),
        &[
            "--keys",
            "60000",
            "--reads",
            "20000",
            "--sweep",
            "none",
            "--workloads",
            "scanmissing,scanrandom,prefixexists,readmissing",
            "--plot",
            "out.svg",
        ],
    );
    assert_eq!(json["config"]["keys_per_prefix"], 10);
    let policies: Vec<&str> = json["config"]["policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(
        policies,
        [
            "blocked",
            "budgeted",
            "classic",
            "none",
            "blocked+prefix",
            "budgeted+prefix",
            "classic+prefix"
        ]
    );
    let results = json["results"].as_array().unwrap();
    for policy in ["blocked", "none"] {
        let p = &row(results, "scanmissing", policy)["prefix"];
        assert_eq!(f(&p["filter_checks"]), 0.0, "{policy}");
        assert!(f(&p["tables_read"]) >= 1.0, "{policy}");
    }
    for policy in ["blocked+prefix", "budgeted+prefix", "classic+prefix"] {
        let p = &row(results, "scanmissing", policy)["prefix"];
        let (in_range, read) = (f(&p["tables_in_range"]), f(&p["tables_read"]));
        let (measured, expected) = (f(&p["measured_prefix_fpr"]), f(&p["expected_prefix_fpr"]));
        assert!(in_range >= 2.0, "{policy}: {in_range} tables in range");
        assert!(read < 0.2 * in_range, "{policy}: reads {read} of {in_range}");
        assert!((read - in_range * measured).abs() < 1e-9, "{policy}");
        assert!(measured < 2.0 * expected + 0.01, "{policy}: {measured} vs {expected}");
        assert!(f(&row(results, "prefixexists", policy)["prefix"]["tables_skipped"]) > 0.0);
        assert!(f(&row(results, "scanrandom", policy)["prefix"]["tables_skipped"]) > 0.0);
    }
    assert!(std::fs::metadata(dir.path().join("out.svg")).unwrap().len() > 0);
}

/// `--profile large-values` at a tiny size: each value size's database goes through the
/// phases in order, and every row carries its write and space amplification, whose parts
/// add up and match the data the run wrote.
#[test]
fn large_values_profile_reports_write_and_space_amplification() {
    let dir = tempfile::tempdir().unwrap();
    let json = run_json(
        dir.path(),
        &["--profile", "large-values", "--payload-bytes", "1000000", "--reads", "300"],
    );
    assert_eq!(json["config"]["profile"], "large-values");
    assert_eq!(json["config"]["value_sizes"], serde_json::json!([4096, 16384, 262144]));
    assert_eq!(json["config"]["memtable_bytes"], 4 << 20);
    assert!(json["config"]["blob_threshold"].is_null());
    let phases = ["fillrandom", "overwrite", "readrandom", "readmissing", "seekrandom"];
    assert_eq!(json["config"]["workloads"], serde_json::json!(phases));
    let results = json["results"].as_array().unwrap();
    assert_eq!(results.len(), 3 * phases.len());
    let u = |v: &Value| v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"));
    for (r, (value_bytes, phase)) in results
        .iter()
        .zip([4096u64, 16384, 262144].iter().flat_map(|v| phases.iter().map(move |p| (*v, *p))))
    {
        assert_eq!(
            (r["workload"].as_str().unwrap(), r["policy"].as_str().unwrap()),
            (phase, "blocked")
        );
        let a = &r["amplification"];
        assert_eq!(u(&a["value_bytes"]), value_bytes, "{r}");
        // Keys: the payload over the value size (at least 2).
        let keys = (1_000_000 / value_bytes).max(2);
        assert_eq!(u(&a["keys"]), keys);
        let entry = 16 + value_bytes;
        assert_eq!(u(&a["live_payload_bytes"]), keys * entry);
        let written = u(&a["payload_bytes_written"]);
        let (wal, tables) = (u(&a["wal_bytes_written"]), u(&a["table_bytes_written"]));
        assert_eq!(u(&a["blob_bytes_written"]), 0, "blob files are off");
        assert_eq!(u(&a["disk_bytes_written"]), wal + tables);
        match phase {
            "fillrandom" | "overwrite" => {
                let puts = if phase == "fillrandom" { keys } else { keys / 2 };
                assert_eq!(written, puts * entry, "{phase} {value_bytes}");
                // Each byte once into the WAL and at least once into a table (the phase
                // ends flushed), plus framing.
                assert!(wal >= written && wal < written + written / 50 + 4096, "{a}");
                assert!(tables >= written, "{a}");
                let w_amp = f(&a["write_amplification"]);
                assert!((w_amp - (wal + tables) as f64 / written as f64).abs() < 1e-9, "{a}");
                assert!(u(&r["flushes_during"]) >= 1, "{r}");
            }
            _ => {
                assert_eq!((written, wal + tables), (0, 0), "a read phase writes nothing: {a}");
                assert!(a["write_amplification"].is_null());
                assert!(f(&r["ops_per_sec"]) > 0.0);
            }
        }
        // Uncompressed, the directory holds at least the live data; the obsolete versions
        // the overwrite left, the WAL's reserved MiB and the tables' indexes and filters
        // add to it.
        let disk = u(&a["disk"]["allocated_bytes"]);
        assert!(disk >= keys * entry, "{a}");
        let s_amp = f(&a["space_amplification"]);
        assert!((s_amp - disk as f64 / (keys * entry) as f64).abs() < 1e-9, "{a}");
        assert!(u(&a["disk"]["files"]) >= 3, "manifest, WAL, tables: {a}");
    }
    // Every phase after the writes sees the same directory: they settled, so nothing runs
    // in the background while the reads are measured.
    for w in results.chunks(phases.len()) {
        let disks: Vec<&Value> = w[1..].iter().map(|r| &r["amplification"]["disk"]).collect();
        assert!(disks.windows(2).all(|d| d[0] == d[1]), "{disks:?}");
    }
}

/// One value size by `--value-bytes`, a subset of the phases by `--workloads` (the fill
/// always runs: it builds the database), and what the profile refuses.
#[test]
fn large_values_profile_takes_one_size_and_refuses_what_it_cannot_run() {
    let dir = tempfile::tempdir().unwrap();
    let json = run_json(
        dir.path(),
        &["--profile", "large-values", "--value-bytes", "8192", "--keys", "40"],
    );
    assert_eq!(json["config"]["value_sizes"], serde_json::json!([8192]));
    assert_eq!(json["config"]["keys"], 40);
    assert_eq!(json["config"]["reads"], 10_000, "at least 10,000 reads by default");
    assert_eq!(json["results"].as_array().unwrap().len(), 5);
    let json = run_json(
        dir.path(),
        &["--profile", "large-values", "--keys", "20", "--workloads", "readmissing"],
    );
    let names: Vec<&str> = json["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["workload"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["fillrandom", "readmissing"].repeat(3));

    let refused = |args: &[&str], why: &str| {
        Command::cargo_bin("bloomkv")
            .unwrap()
            .arg("bench")
            .args(args)
            .assert()
            .failure()
            .stderr(predicates::str::contains(why.to_string()));
    };
    // Out of the option's range: the open refuses it by name.
    refused(
        &["--profile", "large-values", "--keys", "4", "--blob-threshold", "0"],
        "blob_threshold must be between",
    );
    refused(&["--keys", "100", "--workloads", "overwrite"], "large-values only");
    refused(&["--profile", "large-values", "--workloads", "ycsb-a"], "not ycsb-a");
    refused(&["--profile", "large-values", "--plot", "x.svg"], "--plot");
    refused(&["--profile", "large-values", "--value-bytes", "0"], "--value-bytes");
    refused(&["--profile", "large-values", "--keys", "1"], "at least 2 keys");
}

/// `--blob-threshold`: the values go to blob files, whose bytes written are their own part of
/// the write amplification; the tables then hold little more than the keys.
#[test]
fn large_values_profile_with_blob_files_counts_their_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let json = run_json(
        dir.path(),
        &[
            "--profile",
            "large-values",
            "--value-bytes",
            "16384",
            "--keys",
            "200",
            "--reads",
            "100",
            "--blob-threshold",
            "1024",
        ],
    );
    assert_eq!(json["config"]["blob_threshold"], 1024);
    let results = json["results"].as_array().unwrap();
    let u = |v: &Value| v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"));
    for r in
        results.iter().filter(|r| r["workload"] == "fillrandom" || r["workload"] == "overwrite")
    {
        let a = &r["amplification"];
        assert_eq!(u(&a["blob_threshold"]), 1024);
        let (wal, tables, blobs) =
            (u(&a["wal_bytes_written"]), u(&a["table_bytes_written"]), u(&a["blob_bytes_written"]));
        let written = u(&a["payload_bytes_written"]);
        // Each value reaches the disk once at least: in the WAL, whose segments flushes keep
        // as blob files, or copied into a blob file (garbage collection's relocations).
        assert!(wal >= written, "every value logged: {a}");
        assert!(wal + blobs < 3 * written, "{a}");
        assert!(tables < written / 10, "the tables hold references: {a}");
        assert_eq!(u(&a["disk_bytes_written"]), wal + tables + blobs);
    }
}

/// `--profile range` at a tiny size: both databases run every operation; empty ranges find
/// nothing (the run checks), every table a filter let through for one is a false positive,
/// and without range filters nothing is asked.
#[test]
fn range_profile_compares_range_filters_on_and_off() {
    let dir = tempfile::tempdir().unwrap();
    let json = run_json(
        dir.path(),
        &[
            "--profile",
            "range",
            "--keys",
            "60000",
            "--reads",
            "2000",
            "--memtable-bytes",
            "1048576",
        ],
    );
    assert_eq!(json["profile"], "range");
    assert_eq!(json["keys"], 60000);
    // Each phase starts from a warm page cache unless told otherwise.
    assert_eq!(json["page_cache"], "warm");
    assert_eq!(f(&json["range_filter_bits_per_key"]), 16.0);
    let results = json["results"].as_array().unwrap();
    // fill, 2 × 4 empty-range kinds, short, long, readrandom, readmissing: on and off.
    assert_eq!(results.len(), 2 * 13);
    let u = |v: &Value| v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"));
    for r in results {
        assert!(f(&r["ops_per_sec"]) > 0.0, "{r}");
        let on = !r["range_filter_bits_per_key"].is_null();
        let (probes, skips) = (u(&r["range_filter_probes"]), u(&r["range_filter_skips"]));
        if !on {
            assert_eq!(probes, 0, "{r}");
        }
        let workload = r["workload"].as_str().unwrap();
        if workload.starts_with("emptyrange") {
            let in_range = f(&r["tables_in_range_per_op"]);
            assert!(in_range >= 1.0, "several flushed tables: {r}");
            if on {
                // Every table in range is asked (16 bits: up to 8192 integers), and each
                // one let through is a false positive.
                assert_eq!(probes as f64, (in_range * 2000.0).round(), "{r}");
                assert_eq!(u(&r["range_filter_false_positives"]), probes - skips, "{r}");
                let w = u(&r["width"]) as f64;
                assert_eq!(f(&r["false_positive_bound"]), w / 16384.0);
                assert!(f(&r["tables_read_per_op"]) < in_range / 2.0, "{r}");
            } else {
                assert_eq!(f(&r["tables_read_per_op"]), in_range, "{r}");
            }
        }
    }
    // Both read at one shape in L0, saying what was done and each one's tables per level.
    assert!(json["shape"].as_str().is_some_and(|s| !s.is_empty()), "{}", json["shape"]);
    let fills: Vec<&Value> = results.iter().filter(|r| r["workload"] == "fill").collect();
    let l0 = |r: &Value| u(&r["tables_per_level"][0]);
    assert_eq!(l0(fills[0]), l0(fills[1]), "{fills:?}");
    assert!(fills.iter().all(|r| r["tables_per_level_at_rest"].is_array()));
    // Point lookups: blocks searched per lookup, and with range filters the point filters'
    // "maybe"s they turned away (at 10 bits, about 1% of the tables consulted).
    for r in results.iter().filter(|r| r["workload"] == "readmissing") {
        // Ten times as many lookups as the scans make: a phase long enough to compare.
        assert_eq!(u(&r["ops"]), 20_000, "{r}");
        assert!(f(&r["blocks_per_op"]) < 0.05, "{r}");
        let on = !r["range_filter_bits_per_key"].is_null();
        assert_eq!(f(&r["range_filter_point_negatives_per_op"]) > 0.0, on, "{r}");
    }
    // At equal memory: both under one budget, the one with range filters splitting it.
    let json = run_json(
        dir.path(),
        &[
            "--profile",
            "range",
            "--keys",
            "60000",
            "--reads",
            "500",
            "--memtable-bytes",
            "1048576",
            "--bits-per-key",
            "26",
            "--range-share",
            "0.5",
        ],
    );
    assert_eq!((f(&json["range_share"]), u(&json["range_width"])), (0.5, 256));
    let results = json["results"].as_array().unwrap();
    let fills: Vec<&Value> = results.iter().filter(|r| r["workload"] == "fill").collect();
    let memory = |r: &Value| {
        f(&r["point_filter_memory_bits_per_key"]) + f(&r["range_filter_memory_bits_per_key"])
    };
    let (on, off) = (fills[0], fills[1]);
    assert!(on["range_filters"].as_bool().unwrap() && !off["range_filters"].as_bool().unwrap());
    assert!((memory(on) / memory(off) - 1.0).abs() < 0.05, "{on} {off}");
    assert!(f(&on["range_filter_memory_bits_per_key"]) > 8.0, "{on}");
    assert_eq!(f(&off["range_filter_memory_bits_per_key"]), 0.0);
    for r in results.iter().filter(|r| r["workload"] == "emptyrange" && r["width"] == 16) {
        let on = r["range_filters"].as_bool().unwrap();
        assert_eq!(u(&r["range_filter_probes"]) > 0, on, "{r}");
        if on {
            let bound = f(&r["false_positive_bound"]);
            assert!(bound > 0.0 && bound < 0.01, "{r}");
        }
    }
    Command::cargo_bin("bloomkv")
        .unwrap()
        .args(["bench", "--profile", "range", "--range-bits-per-key", "2"])
        .assert()
        .failure()
        .stderr(predicates::str::contains("--range-bits-per-key"));
    Command::cargo_bin("bloomkv")
        .unwrap()
        .args(["bench", "--profile", "range", "--page-cache", "cold"])
        .assert()
        .failure()
        .stderr(predicates::str::contains("--page-cache as-is or warm"));
}
