//! Radix selection by (key, index) composite (kernels/select.cu): the threshold over the sample,
//! the exact top-k of the buffer, the dense fallback and the `radix` baseline, and the output
//! stage.
use candle_core::cuda::cudarc::driver::CudaFunction;

use super::abi::{RowList, SampleArgs, SelArgs, SelSrc, ROW_SEL_BYTES};
use super::launch::{Arena, Arg, Dev, Params};
use super::{module::Family, Input, Shape};
use crate::work_split::{select_chunk, SELECT_THREADS};
use crate::Result;

const THREADS: u32 = SELECT_THREADS;

/// Rows a cooperative selection keeps in every block's shared memory; their histograms rotate
/// over three sets after the rows' own.
const LOCAL_ROWS: usize = crate::kernel_defines::select::LOCAL_ROWS as usize;

/// Per-row state of one selection in flight, reused by successive selections of a call.
pub struct SelState {
    pub sel: Dev<u8>,
    pub hist: Dev<u64>,
}

impl SelState {
    pub fn new(arena: &mut Arena, rows: usize) -> Result<Self> {
        Ok(Self {
            sel: arena.zeros::<u8>(rows * ROW_SEL_BYTES)?,
            hist: arena.zeros::<u64>(Self::hist_len(rows))?,
        })
    }

    fn hist_len(rows: usize) -> usize {
        (rows + 3 * LOCAL_ROWS) * 256
    }

    /// Bytes of the state of `rows` rows laid out by [`Self::at`].
    pub fn bytes(rows: usize) -> usize {
        rows * ROW_SEL_BYTES + 8 * Self::hist_len(rows)
    }

    /// The state of `rows` rows in `bytes(rows)` zeroed bytes at `ptr` (8-byte aligned), so that a
    /// call zeroes it with the rest of its record in one memset.
    pub fn at(ptr: u64, rows: usize) -> Self {
        let sel = Dev::at(ptr, rows * ROW_SEL_BYTES);
        let hist = Dev::at(ptr + (rows * ROW_SEL_BYTES) as u64, Self::hist_len(rows));
        Self { sel, hist }
    }
}

/// What a selection runs over.
pub enum Source<'a> {
    /// The rows of the input, index = position.
    Dense,
    /// Keys and row-local indices, `cap` per row; the row's length is `min(run.counter, cap)` when
    /// `run` is given, else `cap`. `bounded`: a filter's buffer whose threshold is its row's
    /// `tmin`, so that its keys lie between that and the run's largest kept key. `bins`: a bounded
    /// row's histogram of its keys by the filter and room for one bin's composites, from which
    /// [`Selection::exact`] selects in one pass where it can.
    List {
        keys: &'a Dev<u32>,
        idx: &'a Dev<u64>,
        cap: u64,
        run: Option<&'a Dev<u8>>,
        bounded: bool,
        bins: Option<(u64, u64)>,
    },
}

impl Source<'_> {
    /// The histogram and the room of [`Source::List`]'s `bins`, or zeros: the cooperative
    /// selection's `bins` and `edge` arguments.
    fn bins(&self) -> (u64, u64) {
        match self {
            Source::List { bins, .. } => bins.unwrap_or((0, 0)),
            Source::Dense => (0, 0),
        }
    }
}

pub struct Selection<'a> {
    pub arena: &'a Arena,
    pub input: &'a Input,
    pub shape: Shape,
    pub state: &'a SelState,
    pub rows: RowList,
}

impl Selection<'_> {
    fn args(&self, src: &Source, allow_done: bool) -> SelArgs {
        let (lkeys, lidx, lcap, lrun, bounded) = match src {
            Source::Dense => (0, 0, 0, 0, false),
            Source::List {
                keys,
                idx,
                cap,
                run,
                bounded,
                ..
            } => (keys.ptr, idx.ptr, *cap, run.map_or(0, |r| r.ptr), *bounded),
        };
        let len = match src {
            Source::Dense => self.shape.n,
            Source::List { cap, .. } => *cap,
        };
        let chunk = select_chunk(self.shape.rows, len, self.arena.sms);
        let chunks_per_row = len.div_ceil(chunk).max(1);
        SelArgs {
            src: SelSrc {
                x: self.input.ptr,
                n: self.shape.n,
                bounded: (bounded && lrun != 0) as i32,
                mag: self.input.mag as i32,
                lkeys,
                lidx,
                lcap,
                lrun,
            },
            rows: self.shape.rows,
            chunk,
            cpr: chunks_per_row,
            ib: self.shape.index_bits as i32,
            lo: 0,
            width: 0,
            allow_done: allow_done as i32,
            sel: self.state.sel.ptr,
            hist: self.state.hist.ptr,
            list: self.rows,
        }
    }

    fn suffix(&self, src: &Source) -> &'static str {
        match src {
            Source::Dense => self.input.suffix,
            Source::List { .. } => "list",
        }
    }

    /// Builds the lists of pending, passed and failed rows from the filter's outcomes (3 × rows ids
    /// and 3 counts, in that order).
    pub fn classify(
        arena: &Arena,
        run: &Dev<u8>,
        rows: u64,
        lists: &Dev<u32>,
        counts: &Dev<u32>,
    ) -> Result<()> {
        arena.launch_args(
            Family::Select,
            "classify_rows",
            1,
            1024,
            &[
                Arg::U64(run.ptr),
                Arg::U64(rows),
                Arg::U64(lists.ptr),
                Arg::U64(counts.ptr),
            ],
        )
    }

    /// Finds, per gated row, the composite of its `kth`-largest element (digit by digit, 8 bits per
    /// launch). With `allow_done`, a row stops as soon as its remaining bucket is taken whole, and
    /// its state then holds a prefix that selects exactly `kth` elements (not the element itself).
    pub fn threshold(&self, src: &Source, kth: u64, allow_done: bool) -> Result<()> {
        self.init(kth)?;
        self.threshold_from_init(src, allow_done)
    }

    /// Resets the selection state of every row (not only the gated ones) to select `kth` elements.
    pub fn init(&self, kth: u64) -> Result<()> {
        let arena = self.arena;
        let rows = self.shape.rows;
        arena.launch_args(
            Family::Select,
            "select_init",
            arena.grid_for(rows * 256, THREADS, 8),
            THREADS,
            &[
                Arg::U64(self.state.sel.ptr),
                Arg::U64(self.state.hist.ptr),
                Arg::U64(rows),
                Arg::U64(kth),
            ],
        )
    }

    /// [`Self::threshold`] on rows whose state [`Self::init`] has reset (and no selection used
    /// since).
    pub fn threshold_from_init(&self, src: &Source, allow_done: bool) -> Result<()> {
        let arena = self.arena;
        let rows = self.shape.rows;
        let mut args = self.args(src, allow_done);
        let name = format!("select_pass_{}", self.suffix(src));
        let grid = arena.grid_for(rows * args.cpr * THREADS as u64, THREADS, 8);
        let mut hi = self.shape.key_bits + self.shape.index_bits;
        while hi > 0 {
            let lo = hi.saturating_sub(8);
            args.lo = lo as i32;
            args.width = (hi - lo) as i32;
            arena.launch_struct(Family::Select, &name, grid, THREADS, &args)?;
            hi = lo;
        }
        Ok(())
    }

    /// After an early stop: the smallest selected composite into the state's `tmin` (composites of
    /// at most 64 bits).
    pub fn finalize_min(&self, src: &Source) -> Result<()> {
        let args = self.args(src, true);
        let grid = self
            .arena
            .grid_for(self.shape.rows * args.cpr * THREADS as u64, THREADS, 8);
        self.arena.launch_struct(
            Family::Select,
            &format!("select_tmin_{}", self.suffix(src)),
            grid,
            THREADS,
            &args,
        )
    }

    /// The exact top-k of every gated row's list in one block per row (lists of at most
    /// `sample::FUSED_MAX_SAMPLE` elements, composites of at most 64 bits), and with `comps` their
    /// composites beside: one launch.
    pub fn block_topk(
        &self,
        src: &Source,
        out: &Dev<u64>,
        k: u64,
        comps: Option<&Dev<u64>>,
    ) -> Result<()> {
        let (f, args, grid, threads) = self.block_per_row(src, "block_topk_list")?;
        let (o, composite_bits) = (
            out.ptr,
            (self.shape.key_bits + self.shape.index_bits) as i32,
        );
        let c = comps.map_or(0, |c| c.ptr);
        let mut p = Params::default();
        p.push(&args)
            .push(&o)
            .push(&k)
            .push(&composite_bits)
            .push(&c);
        // SAFETY: (SelArgs, u64*, u64, int, u64*) is the kernel's signature.
        unsafe { self.arena.launch(&f, grid, threads, &p, false) }
    }

    /// The `kth`-largest composite of every gated row's list into its `tmin`, one block per row
    /// (lists of at most `sample::FUSED_MAX_SAMPLE` elements, composites of at most 64 bits): one
    /// launch.
    pub fn block_kth(&self, src: &Source, kth: u64) -> Result<()> {
        let (f, args, grid, threads) = self.block_per_row(src, "block_kth_list")?;
        let (t, composite_bits) = (
            kth as u32,
            (self.shape.key_bits + self.shape.index_bits) as i32,
        );
        let mut p = Params::default();
        p.push(&args).push(&t).push(&composite_bits);
        // SAFETY: (SelArgs, u32, int) is the kernel's signature.
        unsafe { self.arena.launch(&f, grid, threads, &p, false) }
    }

    /// The kernel variant (by the list's length), arguments and launch shape of a one-block-per-row
    /// kernel `base` over the gated rows.
    fn block_per_row(&self, src: &Source, base: &str) -> Result<(CudaFunction, SelArgs, u64, u32)> {
        let arena = self.arena;
        let cap = match src {
            Source::List { cap, .. } => *cap,
            Source::Dense => self.shape.n,
        };
        let (threads, variant) = super::sample::block_variant(cap);
        let f = arena.func(Family::Select, &format!("{base}{variant}"))?;
        let grid = self
            .shape
            .rows
            .clamp(1, (2048 / threads * 2 * arena.sms) as u64);
        Ok((f, self.args(src, true), grid, threads))
    }

    /// The exact top-k of every gated row of `src` into `out` (k row-local indices per row, any
    /// order), and with `comps` their composites beside: [`Self::init`] of those rows,
    /// [`Self::threshold_from_init`] and [`Self::compact`] in one cooperative launch, with a grid
    /// barrier between digits, so that an empty list costs one launch. Inside a stream capture, or
    /// on a device without cooperative launches, the separate launches.
    pub fn exact(
        &self,
        src: &Source,
        out: &Dev<u64>,
        k: u64,
        run: &Dev<u8>,
        comps: Option<&Dev<u64>>,
    ) -> Result<()> {
        if !self.arena.cooperative {
            self.init(k)?;
            self.threshold_from_init(src, true)?;
            return self.compact(src, out, k, run, comps);
        }
        let comps = comps.map_or(0, |c| c.ptr);
        let (bins, edge) = src.bins();
        let name = format!("select_all_{}", self.suffix(src));
        self.launch_cooperative(
            &name,
            None,
            src,
            true,
            k,
            &[out.ptr, k, run.ptr, comps, bins, edge],
            None,
        )
    }

    /// [`Self::exact`] of `src` (a list: the buffer), then of the rows of `dense` (its rows the
    /// fallback's, their source the input) in the same cooperative launch: one launch where two
    /// would run, the second nearly always on no row. The two launches where [`Self::exact`] takes
    /// separate ones.
    pub fn exact_then_dense(
        &self,
        src: &Source,
        dense: &Selection,
        out: &Dev<u64>,
        k: u64,
        run: &Dev<u8>,
        comps: Option<&Dev<u64>>,
    ) -> Result<()> {
        if !self.arena.cooperative {
            self.exact(src, out, k, run, comps)?;
            return dense.exact(&Source::Dense, out, k, run, comps);
        }
        let c = comps.map_or(0, |c| c.ptr);
        let dense_args = dense.args(&Source::Dense, true);
        let name = format!("select_all_list_then_{}", self.input.suffix);
        let (bins, edge) = src.bins();
        let extra = [out.ptr, k, run.ptr, c, bins, edge];
        self.launch_cooperative(&name, None, src, true, k, &extra, Some(&dense_args))
    }

    /// [`Self::threshold`] of `kth`, then with `allow_done` [`Self::finalize_min`], in one
    /// cooperative launch (the separate launches where [`Self::exact`] takes them).
    pub fn kth(&self, src: &Source, kth: u64, allow_done: bool) -> Result<()> {
        if !self.arena.cooperative {
            self.threshold(src, kth, allow_done)?;
            return if allow_done {
                self.finalize_min(src)
            } else {
                Ok(())
            };
        }
        let name = format!("select_kth_{}", self.suffix(src));
        self.launch_cooperative(&name, None, src, allow_done, kth, &[], None)
    }

    /// [`Self::kth`] of a sample (`src`, its keys and indices) that the same cooperative launch
    /// draws first by `draw`'s arguments: one launch instead of two. Returns whether it launched;
    /// where the launch cannot be cooperative nothing is launched and the caller draws apart.
    pub fn draw_and_kth(
        &self,
        draw: &SampleArgs,
        src: &Source,
        kth: u64,
        allow_done: bool,
    ) -> Result<bool> {
        if !self.arena.cooperative {
            return Ok(false);
        }
        let name = format!("sample_kth_{}", self.input.suffix);
        self.launch_cooperative(&name, Some(draw), src, allow_done, kth, &[], None)?;
        Ok(true)
    }

    /// Launches `name([SampleArgs draw,] SelArgs, u64 kth, int bits, extra..., [SelArgs tail])`
    /// cooperatively (the extra arguments 64-bit words), as many blocks as the rows' work items ask
    /// for and the device holds at once.
    #[allow(clippy::too_many_arguments)]
    fn launch_cooperative(
        &self,
        name: &str,
        draw: Option<&SampleArgs>,
        src: &Source,
        allow_done: bool,
        kth: u64,
        extra: &[u64],
        tail: Option<&SelArgs>,
    ) -> Result<()> {
        let arena = self.arena;
        let f = arena.func(Family::Select, name)?;
        // Every block of a cooperative launch must be resident at once.
        let per_sm = arena.blocks_per_sm(&f, THREADS)?.clamp(1, 8);
        // The dense fallback's launch nearly always finds no row, and then costs what its grid
        // costs: it runs one block an SM. A benchmark may give it more.
        let per_sm = match src {
            Source::Dense => {
                let cap = arena.tuning.fallback_blocks_per_sm.unwrap_or(1);
                per_sm.min(cap.clamp(1, 8) as u32)
            }
            _ => per_sm,
        };
        let args = self.args(src, allow_done);
        let grid = (self.shape.rows * args.cpr).clamp(1, u64::from(per_sm * arena.sms));
        let bits = (self.shape.key_bits + self.shape.index_bits) as i32;
        let mut p = Params::default();
        if let Some(draw) = draw {
            p.push(draw);
        }
        p.push(&args).push(&kth).push(&bits);
        for word in extra {
            p.push(word);
        }
        if let Some(tail) = tail {
            p.push(tail);
        }
        // SAFETY: ([SampleArgs,] SelArgs, u64, int), the extra arguments and the tail are the
        // kernel's signature, and the grid fits the device at the kernel's occupancy.
        unsafe { arena.launch(&f, grid, THREADS, &p, true) }
    }

    /// Writes the row-local indices of the selected elements into `out` (k per row, any order), and
    /// with `comps` their composites at the same places.
    pub fn compact(
        &self,
        src: &Source,
        out: &Dev<u64>,
        k: u64,
        run: &Dev<u8>,
        comps: Option<&Dev<u64>>,
    ) -> Result<()> {
        let arena = self.arena;
        let args = self.args(src, true);
        let grid = arena.grid_for(self.shape.rows * args.cpr * THREADS as u64, THREADS, 8);
        let f = arena.func(
            Family::Select,
            &format!("select_compact_{}", self.suffix(src)),
        )?;
        let (o, r, c) = (out.ptr, run.ptr, comps.map_or(0, |c| c.ptr));
        let mut p = Params::default();
        p.push(&args).push(&o).push(&k).push(&r).push(&c);
        // SAFETY: (SelArgs, u64*, u64, RowRun*, u64*) is the kernel's signature.
        unsafe { arena.launch(&f, grid, THREADS, &p, false) }
    }
}
