//! The `--plot` SVG: one page of panels drawn with `plotters`.
//!
//! Top, full width: throughput of every workload per policy (grouped bars, log scale, since
//! filtered misses run an order of magnitude faster than fills). Below, in a 4 × 2 grid:
//! latency percentile curves of `readrandom` and `readmissing` per policy; the sweep —
//! false-positive rate measured vs theory (log scale), filter memory, `readmissing`
//! throughput, and data blocks searched per lookup, each against bits per key, then blocks
//! per lookup against filter memory (uniform and budgeted filters at equal memory); and the
//! filter bits per key of each level of the main databases (where a budget puts its bits).

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::report::{Report, WorkloadResult};

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type PlotResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

const BLOCKED: RGBColor = RGBColor(31, 119, 180);
const CLASSIC: RGBColor = RGBColor(255, 127, 14);
const NONE: RGBColor = RGBColor(44, 160, 44);
const BUDGETED: RGBColor = RGBColor(148, 103, 189);
const RIBBON: RGBColor = RGBColor(214, 39, 40);
const BUDGETED_RIBBON: RGBColor = RGBColor(140, 86, 75);

const BLOCKED_PREFIX: RGBColor = RGBColor(23, 190, 207);
const CLASSIC_PREFIX: RGBColor = RGBColor(188, 189, 34);
const BUDGETED_PREFIX: RGBColor = RGBColor(227, 119, 194);

fn policy_color(policy: &str) -> RGBColor {
    match policy {
        "blocked" => BLOCKED,
        "budgeted" => BUDGETED,
        "classic" => CLASSIC,
        "ribbon" => RIBBON,
        "budgeted-ribbon" => BUDGETED_RIBBON,
        "blocked+prefix" => BLOCKED_PREFIX,
        "budgeted+prefix" => BUDGETED_PREFIX,
        "classic+prefix" => CLASSIC_PREFIX,
        _ => NONE,
    }
}

/// The policies of the sweep, in the order they are drawn.
const SWEEP_POLICIES: [&str; 5] = ["blocked", "budgeted", "classic", "ribbon", "budgeted-ribbon"];

/// One line of a line chart.
struct Series {
    label: String,
    color: RGBColor,
    points: Vec<(f64, f64)>,
    /// Theory lines are drawn thin and without markers, measurements thick with markers.
    theory: bool,
}

/// Draws the whole page into `path`.
pub fn draw(report: &Report, path: &Path) -> PlotResult {
    let root = SVGBackend::new(path, (1600, 2500)).into_drawing_area();
    root.fill(&WHITE)?;
    let (title, body) = root.split_vertically(50);
    let c = &report.config;
    title.draw(&Text::new(
        format!(
            "bloomkv bench — {} keys (16 B + {} B, by {}), {} bits/key, {} reads/workload, {} \
             thread(s), {} tree, page cache {}; {} ({} CPUs, L3 {}, load {})",
            c.keys,
            c.value_bytes,
            c.load,
            c.bits_per_key,
            c.reads,
            c.threads,
            c.shape,
            c.page_cache,
            report.machine.cpu_model,
            report.machine.logical_cpus,
            report.machine.l3_cache,
            report.machine.load_average_at_start
        ),
        (20, 15),
        ("sans-serif", 20).into_font(),
    ))?;
    let (top, rest) = body.split_vertically(560);
    throughput_bars(&top, report)?;
    let panels = rest.split_evenly((4, 2));
    latency_curves(&panels[0], report, "readrandom")?;
    latency_curves(&panels[1], report, "readmissing")?;

    let sweep_series =
        |value: &dyn Fn(&super::report::SweepRow) -> f64,
         theory: Option<&dyn Fn(&super::report::SweepRow) -> f64>| {
            let mut out = Vec::new();
            for policy in SWEEP_POLICIES {
                let rows: Vec<_> = report.sweep.iter().filter(|r| r.policy == policy).collect();
                if rows.is_empty() {
                    continue;
                }
                out.push(Series {
                    label: format!("{policy} measured"),
                    color: policy_color(policy),
                    points: rows.iter().map(|r| (r.bits_per_key, value(r))).collect(),
                    theory: false,
                });
                if let Some(t) = theory {
                    out.push(Series {
                        label: format!("{policy} theory"),
                        color: policy_color(policy),
                        points: rows.iter().map(|r| (r.bits_per_key, t(r))).collect(),
                        theory: true,
                    });
                }
            }
            out
        };
    let sweep_title = |what: &str| {
        format!("sweep: {what} vs bits/key ({} keys)", report.sweep.first().map_or(0, |r| r.keys))
    };
    line_panel(
        &panels[2],
        &sweep_title("false-positive rate"),
        "bits per key",
        "false-positive rate (%)",
        true,
        // Measured zero (possible at high bits/key on small runs) cannot sit on a log axis;
        // it is drawn at the axis floor by the panel.
        sweep_series(&|r| r.measured_fpr * 100.0, Some(&|r| r.expected_fpr * 100.0)),
    )?;
    line_panel(
        &panels[3],
        &sweep_title("filter memory"),
        "bits per key",
        "filter memory (MiB)",
        false,
        sweep_series(&|r| r.filter_memory_bytes as f64 / (1 << 20) as f64, None),
    )?;
    line_panel(
        &panels[4],
        &sweep_title("readmissing throughput"),
        "bits per key",
        "readmissing lookups/s (millions)",
        false,
        sweep_series(&|r| r.readmissing_ops_per_sec / 1e6, None),
    )?;
    line_panel(
        &panels[5],
        &sweep_title("data blocks searched per missing lookup"),
        "bits per key (budgeted: the average)",
        "blocks per lookup (theory: Σ table FPR × chance in range)",
        true,
        sweep_series(&|r| r.blocks_per_op, Some(&|r| r.predicted_blocks_per_op)),
    )?;
    line_panel_with(
        &panels[6],
        &format!(
            "sweep: blocks per missing lookup vs filter memory ({} keys)",
            report.sweep.first().map_or(0, |r| r.keys)
        ),
        "filter memory (MiB)",
        "blocks per lookup",
        true,
        SWEEP_POLICIES
            .iter()
            .filter(|p| report.sweep.iter().any(|r| r.policy == **p))
            .map(|&policy| Series {
                label: policy.to_string(),
                color: policy_color(policy),
                points: report
                    .sweep
                    .iter()
                    .filter(|r| r.policy == policy)
                    .map(|r| (r.filter_memory_bytes as f64 / (1 << 20) as f64, r.blocks_per_op))
                    .collect(),
                theory: false,
            })
            .collect(),
        &|x| axis_number(*x),
    )?;
    level_bits(&panels[7], report)?;
    root.present()?;
    Ok(())
}

/// Filter bits per key of each level of the main databases, a line per filtered policy.
fn level_bits(area: &Area, report: &Report) -> PlotResult {
    let series = report
        .shapes
        .iter()
        .filter(|s| s.filter_memory_bytes > 0)
        .map(|s| Series {
            label: format!("{} ({:.2} bits/key overall)", s.policy, s.filter_bits_per_key),
            color: policy_color(&s.policy),
            points: s
                .filter_bits_per_key_per_level
                .iter()
                .enumerate()
                .filter(|(_, &b)| b > 0.0)
                .map(|(level, &b)| (level as f64, b))
                .collect(),
            theory: false,
        })
        .collect();
    line_panel_with(
        area,
        &format!("filter bits per key by level ({} keys, reads' tree)", report.config.keys),
        "level",
        "filter bits per key",
        false,
        series,
        // Only whole levels get a label; the axis's own ticks fall between them too.
        &|x| if (x - x.round()).abs() < 1e-6 { format!("L{}", x.round()) } else { String::new() },
    )
}

/// Grouped bars: ops/s of each workload, one bar per policy, on a log axis.
fn throughput_bars(area: &Area, report: &Report) -> PlotResult {
    let workloads: Vec<&str> = report.config.workloads.iter().map(String::as_str).collect();
    let policies: Vec<&str> = report.config.policies.iter().map(String::as_str).collect();
    let find = |w: &str, p: &str| -> Option<&WorkloadResult> {
        report.results.iter().find(|r| r.workload == w && r.policy == p)
    };
    // With several rounds a bar is the median round and a whisker spans the slowest to the
    // fastest round.
    let spread = |w: &str, p: &str| -> Option<(f64, f64)> {
        let xs: Vec<f64> = report
            .rounds
            .iter()
            .filter(|r| r.workload == w && r.policy == p)
            .map(|r| r.ops_per_sec)
            .collect();
        (xs.len() > 1).then(|| {
            (
                xs.iter().copied().fold(f64::INFINITY, f64::min),
                xs.iter().copied().fold(0.0, f64::max),
            )
        })
    };
    let values: Vec<f64> = report
        .results
        .iter()
        .map(|r| r.ops_per_sec)
        .chain(report.rounds.iter().map(|r| r.ops_per_sec))
        .filter(|v| *v > 0.0)
        .collect();
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min).min(1e4) / 2.0;
    let hi = values.iter().copied().fold(0.0, f64::max).max(1e5) * 2.0;
    // Each workload takes 2 units per policy plus a 2-unit gap, on an integer axis so that the
    // label of a group can sit exactly under its centre.
    let p = policies.len().max(1) as i32;
    let group = 2 * p + 2;
    let n = workloads.len().max(1) as i32;
    let mut chart = ChartBuilder::on(area)
        .caption(
            if report.config.rounds > 1 {
                format!(
                    "throughput per workload and filter policy ({} thread(s); median of {} \
                     rounds, whiskers from the slowest to the fastest)",
                    report.config.threads, report.config.rounds
                )
            } else {
                format!(
                    "throughput per workload and filter policy ({} thread(s))",
                    report.config.threads
                )
            },
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(90)
        .build_cartesian_2d(0..group * n, (lo..hi).log_scale())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels((group * n) as usize)
        .x_label_formatter(&|x| {
            if x % group == p - 1 + 1 && (x / group) < n {
                workloads.get((x / group) as usize).map_or(String::new(), |w| w.to_string())
            } else {
                String::new()
            }
        })
        .x_label_style(("sans-serif", 15))
        .y_desc("operations per second")
        .y_label_formatter(&|y| super::report::si(*y))
        .draw()?;
    for (j, policy) in policies.iter().enumerate() {
        let color = policy_color(policy);
        let bars: Vec<_> = workloads
            .iter()
            .enumerate()
            .filter_map(|(i, w)| {
                let r = find(w, policy)?;
                let x0 = group * i as i32 + 1 + 2 * j as i32;
                Some(Rectangle::new([(x0, lo), (x0 + 2, r.ops_per_sec.max(lo))], color.filled()))
            })
            .collect();
        chart
            .draw_series(bars)?
            .label(*policy)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled()));
        chart.draw_series(workloads.iter().enumerate().filter_map(|(i, w)| {
            let (min, max) = spread(w, policy)?;
            let x = group * i as i32 + 2 + 2 * j as i32;
            Some(PathElement::new(vec![(x, min.max(lo)), (x, max.max(lo))], BLACK.stroke_width(2)))
        }))?;
        // The value on top of each bar (or its whisker): a log axis makes ratios visible but
        // values hard to read.
        let label_style = TextStyle::from(("sans-serif", 12).into_font())
            .pos(Pos::new(HPos::Center, VPos::Bottom));
        chart.draw_series(workloads.iter().enumerate().filter_map(|(i, w)| {
            let r = find(w, policy)?;
            let x = group * i as i32 + 2 + 2 * j as i32;
            let top = spread(w, policy).map_or(r.ops_per_sec, |(_, max)| max);
            Some(Text::new(
                super::report::si(r.ops_per_sec),
                (x, top.max(lo) * 1.04),
                label_style.clone(),
            ))
        }))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .draw()?;
    Ok(())
}

/// Latency percentile curves of one workload, a line per policy. The x axis counts "nines"
/// (0 = p0, 1 = p90, 2 = p99, 3 = p99.9, ...) so the tail gets as much room as the body.
fn latency_curves(area: &Area, report: &Report, workload: &str) -> PlotResult {
    let nines = |p: f64| if p >= 100.0 { 4.5 } else { -(1.0 - p / 100.0).log10() };
    let series: Vec<Series> = report
        .results
        .iter()
        .filter(|r| r.workload == workload)
        .map(|r| Series {
            label: format!("{} (p50 {:.2} µs)", r.policy, r.latency_ns.p50 as f64 / 1e3),
            color: policy_color(&r.policy),
            points: r
                .latency_percentiles
                .iter()
                .filter(|(p, _)| *p <= 99.99 || *p >= 100.0)
                .map(|&(p, ns)| (nines(p), ns as f64 / 1e3))
                .collect(),
            theory: false,
        })
        .collect();
    let title = format!("{workload} latency percentiles (100 = max)");
    line_panel_with(area, &title, "percentile", "latency (µs)", true, series, &|x| match (x * 2.0)
        .round()
        as i64
    {
        0 => "p0".into(),
        2 => "p90".into(),
        4 => "p99".into(),
        6 => "p99.9".into(),
        8 => "p99.99".into(),
        9 => "max".into(),
        _ => String::new(),
    })
}

fn line_panel(
    area: &Area,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    log_y: bool,
    series: Vec<Series>,
) -> PlotResult {
    line_panel_with(area, title, x_desc, y_desc, log_y, series, &|x| format!("{x}"))
}

/// A line chart with a legend; `log_y` selects a logarithmic y axis.
fn line_panel_with(
    area: &Area,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    log_y: bool,
    series: Vec<Series>,
    x_fmt: &dyn Fn(&f64) -> String,
) -> PlotResult {
    let all = || series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1) = (f64::INFINITY, f64::NEG_INFINITY);
    let (mut y0, mut y1) = (f64::INFINITY, f64::NEG_INFINITY);
    for &(x, y) in all() {
        x0 = x0.min(x);
        x1 = x1.max(x);
        if !log_y || y > 0.0 {
            y0 = y0.min(y);
        }
        y1 = y1.max(y);
    }
    if !x0.is_finite() {
        // Nothing measured (e.g. no sweep): an empty frame with the title says so.
        area.draw(&Text::new(
            format!("{title}: no data"),
            (20, 20),
            ("sans-serif", 18).into_font(),
        ))?;
        return Ok(());
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let pad = (x1 - x0) * 0.03;
    let xr = (x0 - pad)..(x1 + pad);
    // Each branch builds a chart of a different coordinate type, so the drawing is shared
    // through a macro rather than a function.
    macro_rules! draw_lines {
        ($chart:ident, $floor:expr) => {{
            $chart
                .configure_mesh()
                .x_desc(x_desc)
                .y_desc(y_desc)
                .x_label_formatter(x_fmt)
                .y_label_formatter(&|y: &f64| axis_number(*y))
                .x_labels(20)
                .label_style(("sans-serif", 14))
                .draw()?;
            for s in &series {
                let style = ShapeStyle {
                    color: s.color.mix(if s.theory { 0.55 } else { 1.0 }),
                    filled: false,
                    stroke_width: if s.theory { 2 } else { 3 },
                };
                let pts: Vec<(f64, f64)> = s
                    .points
                    .iter()
                    .map(|&(x, y)| (x, if y > $floor { y } else { $floor }))
                    .collect();
                let color = s.color;
                let theory = s.theory;
                $chart
                    .draw_series(LineSeries::new(pts.clone(), style))?
                    .label(s.label.clone())
                    .legend(move |(x, y)| {
                        PathElement::new(
                            vec![(x, y), (x + 20, y)],
                            ShapeStyle {
                                color: color.mix(if theory { 0.55 } else { 1.0 }),
                                filled: false,
                                stroke_width: if theory { 2 } else { 3 },
                            },
                        )
                    });
                // Measurements get filled dots, theory hollow squares, so the two stay apart
                // where the lines overlap.
                if s.theory {
                    $chart.draw_series(pts.iter().map(|&p| {
                        EmptyElement::at(p)
                            + Rectangle::new([(-4, -4), (4, 4)], s.color.stroke_width(1))
                    }))?;
                } else {
                    $chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, s.color.filled())))?;
                }
            }
            $chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font(("sans-serif", 14))
                .draw()?;
        }};
    }
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(75);
    if log_y {
        let floor = if y0.is_finite() { y0 / 3.0 } else { 1e-6 };
        let top = (y1 * 3.0).max(floor * 10.0);
        let mut chart = builder.build_cartesian_2d(xr, (floor..top).log_scale())?;
        draw_lines!(chart, floor);
    } else {
        let top = if y1 > 0.0 { y1 * 1.15 } else { 1.0 };
        let mut chart = builder.build_cartesian_2d(xr, 0.0..top)?;
        draw_lines!(chart, f64::NEG_INFINITY);
    }
    Ok(())
}

/// Axis numbers without trailing noise: 10000 → "10000", 2.5 → "2.5", 0.004 → "0.004".
fn axis_number(y: f64) -> String {
    if y == 0.0 {
        return "0".into();
    }
    let a = y.abs();
    let s = if a >= 100.0 {
        format!("{y:.0}")
    } else if a >= 1.0 {
        format!("{y:.1}")
    } else {
        // Enough decimals for two significant digits.
        let decimals = (-a.log10()).ceil() as usize + 1;
        format!("{y:.decimals$}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}
