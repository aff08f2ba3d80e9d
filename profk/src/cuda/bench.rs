//! `profk bench --device cuda`: checks the CUDA path against the CPU path, then times Prof-K,
//! `sort` and `radix` over the benchmark grid with CUDA events and prints one table.
use candle_core::{cuda::cudarc::driver::sys::CUevent_flags, DType, Device, Tensor, D};
use std::fmt::Write as _;

use crate::tuning::{scoped, ForcedRoute, LeftOut, Tuning};
use crate::{topk, topk_with_plan, Mode, NanPolicy, Order, Plan, Result, Selector, TopKOptions};

/// Read bandwidth of the H200 measured with x.sum() at 2^30 floats (TB/s): the floor's denominator.
pub const READ_TBPS: f64 = 4.41;

/// One benchmark shape.
#[derive(Clone, Debug)]
pub struct Case {
    pub label: String,
    pub dims: Vec<usize>,
    pub k: usize,
    pub mode: Mode,
    pub dist: Dist,
}

impl Case {
    /// The output order the shape's workload asks for: ascending indices for the masked
    /// block-selection rows, values descending otherwise.
    fn workload_order(&self) -> Order {
        match self.dist {
            Dist::Masked => Order::Index,
            _ => Order::Desc,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dist {
    Normal,
    /// Uniform on [128.6, 128.7]: a narrow band, hard for radix digits.
    Uniform,
    Cauchy,
    /// Rows of standard normals with a -inf tail over the second half (the masked block-selection
    /// shape).
    Masked,
}

impl Dist {
    fn name(self) -> &'static str {
        match self {
            Dist::Normal => "normal",
            Dist::Uniform => "uniform",
            Dist::Cauchy => "cauchy",
            Dist::Masked => "masked",
        }
    }
}

pub fn input(dims: &[usize], dist: Dist, dtype: DType, dev: &Device) -> Result<Tensor> {
    let x = match dist {
        Dist::Normal => Tensor::randn(0f32, 1f32, dims, dev)?,
        Dist::Uniform => Tensor::rand(128.6f32, 128.7f32, dims, dev)?,
        Dist::Cauchy => {
            let a = ((Tensor::rand(0f32, 1f32, dims, dev)? - 0.5)? * std::f64::consts::PI)?;
            (a.sin()? / a.cos()?)?
        }
        Dist::Masked => {
            let x = Tensor::randn(0f32, 1f32, dims, dev)?;
            let n = dims[dims.len() - 1];
            let keep = Tensor::arange(0u32, n as u32, dev)?
                .lt(n as u32 / 2)?
                .broadcast_as(dims)?;
            keep.where_cond(&x, &Tensor::full(f32::NEG_INFINITY, dims, dev)?)?
        }
    };
    Ok(x.to_dtype(dtype)?)
}

/// The grid, smallest first; `quick` keeps one k per size.
pub fn grid(quick: bool) -> Vec<Case> {
    let mut v = Vec::new();
    let ks: &[usize] = if quick {
        &[1 << 13]
    } else {
        &[1 << 5, 1 << 8, 1 << 13, 1 << 16, 1 << 19]
    };
    for &lg in &[20u32, 24, 26, 28, 30] {
        for &k in ks {
            v.push(case(
                format!("2^{lg}"),
                vec![1 << lg],
                k,
                Mode::Rowwise,
                Dist::Normal,
            ));
        }
    }
    for d in [Dist::Uniform, Dist::Cauchy] {
        for &lg in &[24u32, 28, 30] {
            v.push(case(
                format!("2^{lg}"),
                vec![1 << lg],
                1 << 13,
                Mode::Rowwise,
                d,
            ));
        }
    }
    for k in [1 << 13, 1 << 16] {
        v.push(case(
            "2^31+2^30".into(),
            vec![(1usize << 31) + (1 << 30)],
            k,
            Mode::Flat,
            Dist::Normal,
        ));
    }
    v.extend(batched_rows(&[(16, 20), (128, 20), (1024, 18)]));
    v.push(case(
        "flat 4096x2^16".into(),
        vec![4096, 1 << 16],
        131072,
        Mode::Flat,
        Dist::Normal,
    ));
    v.push(case(
        "flat 8192x2^17".into(),
        vec![8192, 1 << 17],
        262144,
        Mode::Flat,
        Dist::Normal,
    ));
    // Few distinct values: the value order's runs of equal keys span many tiles.
    v.push(case(
        "flat 8192x2^17 ties".into(),
        vec![8192, 1 << 17],
        262144,
        Mode::Flat,
        Dist::Uniform,
    ));
    v.extend(masked_rows());
    v
}

/// `rows` rows of 2^lg normal values for each (rows, lg), with k = 64 and 1024.
fn batched_rows(shapes: &[(usize, u32)]) -> Vec<Case> {
    let mut v = Vec::new();
    for &(rows, lg) in shapes {
        for k in [64, 1024] {
            v.push(case(
                format!("{rows}x2^{lg}"),
                vec![rows, 1 << lg],
                k,
                Mode::Rowwise,
                Dist::Normal,
            ));
        }
    }
    v
}

/// The masked block-selection rows, with k = 64 and 512.
fn masked_rows() -> Vec<Case> {
    [64, 512]
        .map(|k| {
            case(
                "masked 8192x32768".into(),
                vec![8192, 32768],
                k,
                Mode::Rowwise,
                Dist::Masked,
            )
        })
        .into()
}

/// A Markdown table's header row and the separator under it.
fn table_head(out: &mut String, header: &str) {
    let columns = header.matches('|').count() - 1;
    writeln!(out, "{header}\n{}|", "|---".repeat(columns)).ok();
}

/// Three inputs of the case, for the timing loop to rotate through.
fn rotated_inputs(c: &Case, dtype: DType, dev: &Device) -> Result<Vec<Tensor>> {
    (0..3).map(|_| input(&c.dims, c.dist, dtype, dev)).collect()
}

fn case(label: String, dims: Vec<usize>, k: usize, mode: Mode, dist: Dist) -> Case {
    Case {
        label,
        dims,
        k,
        mode,
        dist,
    }
}

/// How long [`time_queued`] keeps the stream busy before a call: longer than any call takes to
/// queue.
const QUEUE_NS: u64 = 2_000_000;

/// Median milliseconds per call over `reps` calls (CUDA events around each call, inputs rotated,
/// no host synchronization inside a call), attempts of the last call, aux bytes.
pub fn time(xs: &[Tensor], k: usize, opts: &TopKOptions, reps: usize) -> Result<(f64, u32, usize)> {
    let t = time_host(xs, k, opts, reps)?;
    Ok((t.0, t.1, t.2))
}

/// [`time`] plus the median host milliseconds spent queuing one call.
pub fn time_host(
    xs: &[Tensor],
    k: usize,
    opts: &TopKOptions,
    reps: usize,
) -> Result<(f64, u32, usize, f64)> {
    time_host_plan(xs, k, opts, reps, None)
}

/// [`time_host`] with an explicit plan (`None`: the plan the call would choose).
pub fn time_host_plan(
    xs: &[Tensor],
    k: usize,
    opts: &TopKOptions,
    reps: usize,
    plan: Option<Plan>,
) -> Result<(f64, u32, usize, f64)> {
    let t = time_calls(xs, k, opts, reps, plan, false)?;
    Ok((t.0, t.1, t.2, t.3))
}

/// How long the device takes for one call whose work is all queued before it starts: each timed
/// call is queued behind a kernel that keeps the stream busy longer than the host takes to queue
/// the call, so the difference to [`time_host`] is the device waiting on the host.
pub fn time_queued(xs: &[Tensor], k: usize, opts: &TopKOptions, reps: usize) -> Result<f64> {
    Ok(time_calls(xs, k, opts, reps, None, true)?.0)
}

/// Median milliseconds per call, attempts of the last call, aux bytes, and the median host
/// milliseconds spent queuing a call and from its start to its first kernel launch (the device
/// idles that long before the call's work).
fn time_calls(
    xs: &[Tensor],
    k: usize,
    opts: &TopKOptions,
    reps: usize,
    plan: Option<Plan>,
    queued: bool,
) -> Result<(f64, u32, usize, f64, f64)> {
    let call = |x: &Tensor| match plan {
        Some(p) => super::topk_deferred_with_plan(x, k, opts, p),
        None => super::topk_deferred(x, k, opts),
    };
    let Device::Cuda(dev) = xs[0].device() else {
        return Err(crate::Error::Param("timing needs a CUDA tensor".into()));
    };
    let stream = dev.cuda_stream();
    let ctx = stream.context().clone();
    let ev = || {
        ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(super::launch::drv)
    };
    for x in xs {
        call(x)?.status.read()?;
    }
    let mut times = Vec::with_capacity(reps);
    let mut hosts = Vec::with_capacity(reps);
    let mut firsts = Vec::with_capacity(reps);
    let mut last = None;
    for i in 0..reps {
        let (a, b) = (ev()?, ev()?);
        if queued {
            let arena = super::launch::Arena::new(stream.clone(), Tuning::active())?;
            let ns = super::launch::Arg::U64(QUEUE_NS);
            arena.launch_args(super::module::Family::Baselines, "spin_ns", 1, 32, &[ns])?;
        }
        a.record(&stream).map_err(super::launch::drv)?;
        let host = std::time::Instant::now();
        super::launch::watch_first_launch(true);
        let d = call(&xs[i % xs.len()])?;
        hosts.push(host.elapsed().as_secs_f64() * 1e3);
        if let Some(first) = super::launch::watch_first_launch(false) {
            firsts.push((first - host).as_secs_f64() * 1e3);
        }
        b.record(&stream).map_err(super::launch::drv)?;
        times.push(a.elapsed_ms(&b).map_err(super::launch::drv)? as f64);
        last = Some(d);
    }
    let d = last.expect("reps > 0");
    let stats = d.status.read()?;
    times.sort_by(f64::total_cmp);
    hosts.sort_by(f64::total_cmp);
    firsts.sort_by(f64::total_cmp);
    Ok((
        times[times.len() / 2],
        stats.attempts,
        d.status.aux_bytes,
        hosts[hosts.len() / 2],
        firsts.get(firsts.len() / 2).copied().unwrap_or(f64::NAN),
    ))
}

/// Prints the timing table over the grid (the cases whose label contains `only`, when given).
pub fn run_grid(
    dev: &Device,
    quick: bool,
    dtype: DType,
    only: Option<&str>,
    out: &mut String,
) -> Result<()> {
    run_cases(dev, labelled(grid(quick), only), false, dtype, out)
}

/// The shapes the peers are measured on (bench/peers/topk_peers.sh): single rows of 2^24, 2^28 and
/// 2^30 at k = 8192, the batched and masked rows, and the flat 8192x2^17 selection.
pub fn peer_cases() -> Vec<Case> {
    const LABELS: [&str; 8] = [
        "2^24",
        "2^28",
        "2^30",
        "16x2^20",
        "128x2^20",
        "1024x2^18",
        "flat 8192x2^17",
        "masked 8192x32768",
    ];
    grid(true)
        .into_iter()
        .filter(|c| LABELS.contains(&c.label.as_str()))
        .filter(|c| matches!(c.dist, Dist::Normal | Dist::Masked))
        .collect()
}

/// Prof-K alone on [`peer_cases`] (those whose label contains `only`, when given), in the columns
/// of [`run_grid`].
pub fn run_peers(dev: &Device, dtype: DType, only: Option<&str>, out: &mut String) -> Result<()> {
    run_cases(dev, labelled(peer_cases(), only), true, dtype, out)
}

/// The cases whose label contains `only`, or all of them.
fn labelled(cases: Vec<Case>, only: Option<&str>) -> Vec<Case> {
    cases
        .into_iter()
        .filter(|c| only.is_none_or(|o| c.label.contains(o)))
        .collect()
}

/// The timing table over `cases`, each in the order its workload asks for: Prof-K, and unless
/// `profk_only` the `radix` and `sort` baselines.
fn run_cases(
    dev: &Device,
    cases: Vec<Case>,
    profk_only: bool,
    dtype: DType,
    out: &mut String,
) -> Result<()> {
    table_head(
        out,
        "| shape | mode, order | dist | k | selector | ms | GB/s | of read BW | attempts | aux MB |",
    );
    for c in cases {
        let n: usize = c.dims.iter().product();
        let inputs = if n >= 1 << 30 { 1 } else { 3 };
        let xs: Vec<Tensor> = (0..inputs)
            .map(|_| input(&c.dims, c.dist, dtype, dev))
            .collect::<Result<_>>()?;
        let reps = if n >= 1 << 28 { 10 } else { 30 };
        let mut sels = vec![Selector::Profk];
        if !profk_only {
            sels.push(Selector::Radix);
            if c.k == 1 << 13 || c.dims.len() > 1 {
                sels.push(Selector::Sort);
            }
        }
        for s in sels {
            if s == Selector::Sort && n > 1 << 30 {
                continue;
            }
            let opts = TopKOptions {
                selector: s,
                mode: c.mode,
                order: c.workload_order(),
                ..Default::default()
            };
            let (ms, attempts, aux) = time(&xs, c.k, &opts, reps)?;
            let bytes = (n * dtype.size_in_bytes()) as f64;
            let gbs = bytes / ms / 1e6;
            writeln!(
                out,
                "| {} | {:?} {:?} | {} | {} | {:?} | {:.3} | {:.0} | {:.2} | {} | {:.1} |",
                c.label,
                c.mode,
                opts.order,
                c.dist.name(),
                c.k,
                s,
                ms,
                gbs,
                gbs / (READ_TBPS * 1e3),
                attempts,
                aux as f64 / 1e6
            )
            .ok();
            eprintln!("{}", out.lines().last().unwrap_or(""));
        }
    }
    Ok(())
}

/// The target rows: one 2^30 row (k = 8192) and the SAE's two batch-global selections.
pub fn targets() -> Vec<Case> {
    vec![
        case(
            "2^30".into(),
            vec![1 << 30],
            1 << 13,
            Mode::Rowwise,
            Dist::Normal,
        ),
        case(
            "flat 4096x2^16".into(),
            vec![4096, 1 << 16],
            131072,
            Mode::Flat,
            Dist::Normal,
        ),
        case(
            "flat 8192x2^17".into(),
            vec![8192, 1 << 17],
            262144,
            Mode::Flat,
            Dist::Normal,
        ),
    ]
}

/// Prof-K on the [`targets`] (those whose label contains `only`, when given), values-descending and
/// ascending-index output (the SAE's order), with the read floor beside.
pub fn run_targets(dev: &Device, only: Option<&str>, out: &mut String) -> Result<()> {
    table_head(
        out,
        "| shape | mode | k | order | Prof-K ms | floor ms | of floor | attempts | aux MB |",
    );
    for c in labelled(targets(), only) {
        let n: usize = c.dims.iter().product();
        let xs = rotated_inputs(&c, DType::F32, dev)?;
        let floor = (4 * n) as f64 / (READ_TBPS * 1e9);
        for order in [Order::Desc, Order::Index] {
            let opts = TopKOptions {
                mode: c.mode,
                order,
                ..Default::default()
            };
            let (ms, attempts, aux) = time(&xs, c.k, &opts, 30)?;
            writeln!(
                out,
                "| {} | {:?} | {} | {:?} | {:.3} | {:.3} | {:.2} | {} | {:.1} |",
                c.label,
                c.mode,
                c.k,
                order,
                ms,
                floor,
                ms / floor,
                attempts,
                aux as f64 / 1e6
            )
            .ok();
            eprintln!("{}", out.lines().last().unwrap_or(""));
        }
    }
    Ok(())
}

/// The row-wise shapes (the batched rows and the masked block-selection rows), then few
/// rows small enough for the split histogram path: single rows of 2^20 to 2^24 at k = 8192, and 16
/// x 2^20.
pub fn row_cases() -> Vec<Case> {
    let mut v = batched_rows(&[(1024, 18), (128, 20)]);
    v.extend(masked_rows());
    v.extend([20, 22, 24].map(|lg: u32| {
        case(
            format!("2^{lg}"),
            vec![1 << lg],
            8192,
            Mode::Rowwise,
            Dist::Normal,
        )
    }));
    v.extend(batched_rows(&[(16, 20)]));
    v
}

/// Prof-K on the [`row_cases`] (those whose label contains `only`, when given) in both output
/// orders: the default path, the histogram selection ("row kernel") and the sampled path, beside
/// the read floor.
pub fn run_rows(dev: &Device, dtype: DType, only: Option<&str>, out: &mut String) -> Result<()> {
    table_head(
        out,
        "| shape | dist | dtype | k | order | path | ms | floor ms | of floor | aux MB |",
    );
    for c in labelled(row_cases(), only) {
        let n: usize = c.dims.iter().product();
        let xs = rotated_inputs(&c, dtype, dev)?;
        let floor = (n * dtype.size_in_bytes()) as f64 / (READ_TBPS * 1e9);
        for order in [Order::Desc, Order::Index] {
            let opts = TopKOptions {
                mode: c.mode,
                order,
                ..Default::default()
            };
            let paths = [
                ("default", ForcedRoute::ByShape),
                ("row kernel", ForcedRoute::Histogram),
                ("sampled", ForcedRoute::Sampled),
            ];
            for (path, route) in paths {
                let tuning = Tuning {
                    route,
                    ..Tuning::active()
                };
                let (ms, _, aux) = scoped(tuning, || time(&xs, c.k, &opts, 30))?;
                writeln!(
                    out,
                    "| {} | {} | {:?} | {} | {:?} | {} | {:.3} | {:.3} | {:.2} | {:.1} |",
                    c.label,
                    c.dist.name(),
                    dtype,
                    c.k,
                    order,
                    path,
                    ms,
                    floor,
                    ms / floor,
                    aux as f64 / 1e6
                )
                .ok();
                eprintln!("{}", out.lines().last().unwrap_or(""));
            }
        }
    }
    Ok(())
}

/// Times Prof-K with stages left out (see [`LeftOut`]) on the shapes where the targets are set:
/// the differences between rows place the time of each stage.
pub fn run_stages(dev: &Device, out: &mut String) -> Result<()> {
    let base = Tuning::active();
    let without = |left_out: LeftOut| Tuning { left_out, ..base };
    let no_redraw = LeftOut {
        redraw: true,
        ..LeftOut::default()
    };
    let no_fallback = LeftOut {
        fallback: true,
        ..no_redraw
    };
    let no_buffer = LeftOut {
        buffer_selection: true,
        ..no_fallback
    };
    // 2^24 and 2^28, the target rows, and two row-wise batches.
    let small_rows = [1 << 24, 1 << 28].map(|n: usize| {
        let label = format!("2^{}", n.trailing_zeros());
        case(label, vec![n], 1 << 13, Mode::Rowwise, Dist::Normal)
    });
    let batches = [
        case(
            "1024x2^18".into(),
            vec![1024, 1 << 18],
            64,
            Mode::Rowwise,
            Dist::Normal,
        ),
        case(
            "masked 8192x32768".into(),
            vec![8192, 32768],
            64,
            Mode::Rowwise,
            Dist::Masked,
        ),
    ];
    let shapes: Vec<Case> = small_rows
        .into_iter()
        .chain(targets())
        .chain(batches)
        .collect();
    let block_sample = Tuning {
        no_spread_sample: true,
        ..base
    };
    let variants = [
        ("full", base),
        (
            "full, sample's threshold by one block or grid barriers",
            block_sample,
        ),
        ("- redraw launches", without(no_redraw)),
        ("- redraw, fallback launches", without(no_fallback)),
        ("- redraw, fallback, buffer top-k", without(no_buffer)),
        (
            "sample + filter only",
            without(LeftOut::AFTER_FIRST_ATTEMPT),
        ),
    ];
    table_head(
        out,
        "| shape | k | variant | ms | floor ms | host ms | host ms to the first launch |",
    );
    for c in shapes {
        let n: usize = c.dims.iter().product();
        let xs = rotated_inputs(&c, DType::F32, dev)?;
        let floor = (4 * n) as f64 / (READ_TBPS * 1e9);
        let mut row = |name: &str, (ms, host, first): (f64, f64, f64)| {
            writeln!(
                out,
                "| {} | {} | {} | {:.3} | {:.3} | {:.3} | {:.3} |",
                c.label, c.k, name, ms, floor, host, first
            )
            .ok();
            eprintln!("{}", out.lines().last().unwrap_or(""));
        };
        let opts = TopKOptions {
            mode: c.mode,
            ..Default::default()
        };
        for (name, tuning) in variants {
            let t = scoped(tuning, || time_calls(&xs, c.k, &opts, 20, None, false))?;
            row(name, (t.0, t.3, t.4));
        }
        // The device's own time: the full call with its work queued before it starts.
        let queued = time_queued(&xs, c.k, &opts, 20)?;
        row("full, queued", (queued, f64::NAN, f64::NAN));
        // The order the SAE and error feedback ask for, and the default sample where the GPU plan
        // takes another.
        let rows = c.dims[..c.dims.len() - 1].iter().product::<usize>().max(1);
        let index = TopKOptions {
            mode: c.mode,
            order: Order::Index,
            ..Default::default()
        };
        let (sel_n, sel_rows) = match c.mode {
            Mode::Flat => (n, 1),
            Mode::Rowwise => (n / rows, rows),
        };
        let eps = index.row_budget(sel_rows);
        let gpu = crate::select::gpu_plan_for(sel_n, c.k, eps, sel_rows)?;
        let default: Plan =
            crate::params::cached(sel_n as u64, c.k as u64, eps, crate::params::Method::Exact)?
                .into();
        let mut extra = vec![("full, order = index".to_string(), None)];
        if let Some(g) = gpu.filter(|g| *g != default) {
            extra[0].0 = format!("full, order = index (S = {}, M = {})", g.sample, g.capacity);
            extra.push((
                format!(
                    "full, order = index, default S = {} (M = {})",
                    default.sample, default.capacity
                ),
                Some(default),
            ));
        }
        for (name, plan) in extra {
            let t = time_calls(&xs, c.k, &index, 20, plan, false)?;
            row(&name, (t.0, t.3, t.4));
        }
        // What a row that fails every attempt costs, on the path its plan takes (the same
        // capacity): the smallest sampled element as threshold overflows every buffer.
        if let (1, Some(g)) = (sel_rows, gpu) {
            let failing = Plan { t: g.sample, ..g };
            let t = time_calls(&xs, c.k, &opts, 5, Some(failing), false)?;
            row("every attempt failed (t = S)", (t.0, t.3, t.4));
        }
    }
    Ok(())
}

/// Compares every selector on the device with the CPU path; returns the failures (empty = all
/// equal).
pub fn check(dev: &Device) -> Result<Vec<String>> {
    let mut fails = Vec::new();
    let mut cases: Vec<(String, Tensor, usize, TopKOptions, Option<Plan>)> = Vec::new();
    let base = TopKOptions::default();
    for dt in [DType::F32, DType::F16, DType::BF16] {
        for (dims, k) in [
            (vec![1usize << 20], 100usize),
            (vec![3, 50_000], 1000),
            (vec![1 << 16], 1),
            (vec![40_000], 40_000),
            (vec![40_000], 39_999),
            (vec![7], 3),
            (vec![4, 1], 1),
        ] {
            for order in [Order::Desc, Order::Index] {
                let x = input(&dims, Dist::Normal, dt, dev)?;
                cases.push((
                    format!("{dt:?} {dims:?} k={k} {order:?}"),
                    x,
                    k,
                    TopKOptions {
                        order,
                        ..base.clone()
                    },
                    None,
                ));
            }
        }
        let x = input(&[256, 32768], Dist::Masked, dt, dev)?;
        cases.push((format!("{dt:?} masked rows"), x, 512, base.clone(), None));
        // The row kernel: short rows of odd length, and tied rows whose bin overflows its buffer.
        let x = input(&[200, 3001], Dist::Normal, dt, dev)?;
        for order in [Order::Desc, Order::Index] {
            cases.push((
                format!("{dt:?} rows kernel {order:?}"),
                x.clone(),
                64,
                TopKOptions {
                    order,
                    ..base.clone()
                },
                None,
            ));
        }
        let x = Tensor::ones((160, 5000), dt, dev)?;
        cases.push((
            format!("{dt:?} rows kernel ties"),
            x,
            10,
            base.clone(),
            None,
        ));
    }
    let x = input(&[1 << 22], Dist::Uniform, DType::BF16, dev)?;
    cases.push(("bf16 uniform ties".into(), x, 5000, base.clone(), None));
    let x = Tensor::ones(1 << 20, DType::F32, dev)?;
    cases.push(("all equal".into(), x, 777, base.clone(), None));
    // Single rows and a flat row whose buffers pass one block, and an all-equal row whose buffer is
    // one run of ties.
    for dt in [DType::F32, DType::BF16] {
        let x = input(&[1 << 22], Dist::Normal, dt, dev)?;
        for order in [Order::Desc, Order::Index] {
            cases.push((
                format!("{dt:?} one row, large buffer {order:?}"),
                x.clone(),
                8192,
                TopKOptions {
                    order,
                    ..base.clone()
                },
                None,
            ));
        }
    }
    cases.push((
        "flat, large buffer".into(),
        input(&[64, 65536], Dist::Normal, DType::F32, dev)?,
        100_000,
        TopKOptions {
            mode: Mode::Flat,
            ..base.clone()
        },
        None,
    ));
    let x = Tensor::ones(1 << 21, DType::F32, dev)?;
    cases.push((
        "all equal, large buffer".into(),
        x,
        20_000,
        base.clone(),
        None,
    ));
    let x = Tensor::full(f32::NEG_INFINITY, (8, 20_000), dev)?;
    cases.push(("all masked rows".into(), x, 64, base.clone(), None));
    let x = input(&[1 << 20], Dist::Normal, DType::F32, dev)?;
    cases.push((
        "by magnitude".into(),
        x.clone(),
        300,
        TopKOptions {
            by_magnitude: true,
            ..base.clone()
        },
        None,
    ));
    cases.push((
        "flat".into(),
        input(&[64, 4096], Dist::Normal, DType::F32, dev)?,
        2000,
        TopKOptions {
            mode: Mode::Flat,
            ..base.clone()
        },
        None,
    ));
    cases.push(("k=0".into(), x.clone(), 0, base.clone(), None));
    // Plans that fail on purpose: recall failure every time (t = S) and overflow every time (M =
    // k).
    cases.push((
        "forced fallback".into(),
        x.clone(),
        50,
        base.clone(),
        Some(Plan {
            sample: 1024,
            t: 1024,
            capacity: 50,
        }),
    ));
    cases.push((
        "forced overflow".into(),
        x.clone(),
        50,
        base.clone(),
        Some(Plan {
            sample: 1024,
            t: 200,
            capacity: 60,
        }),
    ));
    cases.push((
        "approximate".into(),
        x.clone(),
        50,
        TopKOptions {
            approximate: true,
            ..base.clone()
        },
        None,
    ));
    let mut with_nan = x.to_vec1::<f32>()?;
    with_nan[12345] = f32::NAN;
    with_nan[999_999] = f32::NAN;
    let xn = Tensor::new(with_nan.as_slice(), dev)?;
    cases.push((
        "nan largest".into(),
        xn.clone(),
        10,
        TopKOptions {
            nan: NanPolicy::Largest,
            ..base.clone()
        },
        None,
    ));
    cases.push(("nan error".into(), xn, 10, base.clone(), None));

    let wide_x = input(&[3, 70_000], Dist::Normal, DType::F32, dev)?;
    for order in [Order::Desc, Order::Index] {
        cases.push((
            format!("wide path {order:?}"),
            wide_x.clone(),
            2000,
            TopKOptions {
                order,
                ..base.clone()
            },
            None,
        ));
    }
    cases.push((
        "wide path overflow".into(),
        wide_x,
        50,
        base.clone(),
        Some(Plan {
            sample: 20_000,
            t: 200,
            capacity: 60,
        }),
    ));

    for (name, x, k, opts, plan) in cases {
        let wide = name.starts_with("wide path");
        let cpu = x.to_device(&Device::Cpu)?;
        for sel in [Selector::Profk, Selector::Sort, Selector::Radix] {
            let o = TopKOptions {
                selector: sel,
                ..opts.clone()
            };
            let run = |t: &Tensor| match plan {
                Some(p) if sel == Selector::Profk => topk_with_plan(t, k, &o, p),
                _ => topk(t, k, &o),
            };
            let (want, got) = (
                run(&cpu),
                scoped(
                    Tuning {
                        force_wide: wide,
                        ..Tuning::active()
                    },
                    || run(&x),
                ),
            );
            let same = match (&want, &got) {
                (Ok(w), Ok(g)) => {
                    // Bit patterns, so that NaNs and signed zeros compare too.
                    let bits = |t: &Tensor| -> Result<Vec<u64>> {
                        let v = t.to_device(&Device::Cpu)?.to_dtype(DType::F64)?;
                        Ok(v.flatten_all()?
                            .to_vec1::<f64>()?
                            .iter()
                            .map(|v| v.to_bits())
                            .collect())
                    };
                    w.indices.to_vec1_flat()?
                        == g.indices.to_device(&Device::Cpu)?.to_vec1_flat()?
                        && bits(&w.values)? == bits(&g.values)?
                }
                (Err(w), Err(g)) => w.to_string() == g.to_string(),
                _ => false,
            };
            let attempts = got
                .as_ref()
                .map(|g| (g.stats.attempts, g.stats.fell_back))
                .ok();
            if !same {
                fails.push(format!(
                    "{name} {sel:?}: cpu {:?} cuda {:?}",
                    want.as_ref().map(|_| "ok").map_err(|e| e.to_string()),
                    got.as_ref().map(|_| "ok").map_err(|e| e.to_string())
                ));
            }
            eprintln!(
                "check {name:<32} {sel:?}: {} attempts/fallback {attempts:?}",
                if same { "ok" } else { "MISMATCH" }
            );
        }
    }
    let _ = D::Minus1;
    Ok(fails)
}

/// One row of 2^32 + 4097 f32 (17 GB): 64-bit offsets and the composites wider than 64 bits, for
/// `profk` and `radix` against the CPU path. Returns the failures.
pub fn check_big(dev: &Device) -> Result<Vec<String>> {
    let n = (1usize << 32) + 4097;
    let x = input(&[n], Dist::Normal, DType::F32, dev)?;
    let cpu = x.to_device(&Device::Cpu)?;
    let want = topk(&cpu, 1000, &TopKOptions::default())?
        .indices
        .to_vec1::<i64>()?;
    let mut fails = Vec::new();
    for sel in [Selector::Profk, Selector::Radix] {
        let got = topk(
            &x,
            1000,
            &TopKOptions {
                selector: sel,
                ..Default::default()
            },
        )?;
        let same = got.indices.to_device(&Device::Cpu)?.to_vec1::<i64>()? == want;
        eprintln!(
            "check n = 2^32 + 4097 {sel:?}: {} (attempts {})",
            if same { "ok" } else { "MISMATCH" },
            got.stats.attempts
        );
        if !same {
            fails.push(format!("n = 2^32 + 4097 {sel:?}"));
        }
    }
    Ok(fails)
}

trait FlatVec {
    fn to_vec1_flat(&self) -> Result<Vec<i64>>;
}

impl FlatVec for Tensor {
    fn to_vec1_flat(&self) -> Result<Vec<i64>> {
        Ok(self.flatten_all()?.to_vec1::<i64>()?)
    }
}
