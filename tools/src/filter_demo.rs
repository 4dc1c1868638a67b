//! `bloomkv filter-demo`: builds blocked and classic filters over many keys and compares the
//! measured false-positive rate with theory, and the cost of a probe.

use std::process::ExitCode;
use std::time::Instant;

use bloomkv::filter::{Filter, FilterPolicy};

/// Options of `filter-demo`.
#[derive(clap::Args)]
pub struct Args {
    /// Keys in each filter.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Absent keys probed per filter.
    #[arg(long, default_value_t = 10_000_000)]
    probes: u64,
    /// Bits of filter per key (comma-separated list).
    #[arg(long, value_delimiter = ',', default_value = "6,10,16")]
    bits_per_key: Vec<f64>,
}

fn key(i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&i.to_be_bytes());
    k[8..].copy_from_slice(b"filterdm");
    k
}

pub fn run(args: &Args) -> Result<ExitCode, bloomkv::Error> {
    println!("{} keys per filter, {} absent probes each (16-byte keys)\n", args.keys, args.probes);
    println!(
        "{:<14} {:>5} {:>3} {:>10} {:>11} {:>11} {:>8} {:>10} {:>10}",
        "filter", "bpk", "k", "memory", "measured", "theory", "diff", "build", "probe"
    );
    for &bpk in &args.bits_per_key {
        for policy in [
            FilterPolicy::BlockedBloom { bits_per_key: bpk },
            FilterPolicy::ClassicBloom { bits_per_key: bpk },
        ] {
            policy.validate()?;
            let t = Instant::now();
            let f = Filter::build(policy, (0..args.keys).map(key));
            let build_ns = t.elapsed().as_nanos() as f64 / args.keys.max(1) as f64;
            let t = Instant::now();
            let fp =
                (args.keys..args.keys + args.probes).filter(|&i| f.may_contain(&key(i))).count();
            let probe_ns = t.elapsed().as_nanos() as f64 / args.probes.max(1) as f64;
            let measured = fp as f64 / args.probes.max(1) as f64;
            let theory = f.expected_fpr();
            println!(
                "{:<14} {:>5} {:>3} {:>8.2}MB {:>10.4}% {:>10.4}% {:>+7.1}% {:>7.1}ns/k {:>7.1}ns",
                f.kind().to_string(),
                bpk,
                f.num_probes(),
                f.memory_bytes() as f64 / 1e6,
                measured * 100.0,
                theory * 100.0,
                (measured / theory - 1.0) * 100.0,
                build_ns,
                probe_ns
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
