//! The choices a benchmark may change to time alternatives of the CUDA path, as one value.
//!
//! [`Tuning::default`] is production: every field says "the rule the code documents". A call takes
//! its tuning at its entry ([`Tuning::active`]) and hands it down explicitly (the call's arena
//! carries it), so that nothing on the way reads the environment or a hook. Only the `bench`
//! feature can run code under another tuning ([`scoped`]); without it [`Tuning::active`] is the
//! constant default. The `profk bench` command builds its tuning from the `PROFK_*` variables
//! (named on each field) in one place.

/// Stages of Prof-K a timing variant leaves out. The results of such a call are not meaningful.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeftOut {
    /// The second attempt of the rows that failed the first.
    pub redraw: bool,
    /// The exact top-k of each row's buffer.
    pub buffer_selection: bool,
    /// The dense selection of the rows that failed every attempt.
    pub fallback: bool,
    /// The output stage: the sort of each row's k and the gather of values and indices.
    pub output: bool,
}

impl LeftOut {
    /// Everything after the first attempt's count check.
    pub const AFTER_FIRST_ATTEMPT: LeftOut = LeftOut {
        redraw: true,
        buffer_selection: true,
        fallback: true,
        output: true,
    };
}

/// Which algorithm a call takes, where a benchmark overrides `cuda::route`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ForcedRoute {
    /// The route's rule.
    #[default]
    ByShape,
    /// The sampled path wherever the histogram selection would run.
    Sampled,
    /// The histogram selection on any shape whose composites fit 64 bits.
    Histogram,
}

/// How the one-block histogram kernel ends (kernels/rows.cu `OUT_UNSORTED`, `OUT_NONE`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HistogramOutput {
    /// Production: the sorted output where it writes it, else the slots.
    #[default]
    Full,
    /// The slots unsorted (`PROFK_ROWS_OUTPUT=unsorted`).
    Unsorted,
    /// No output at all (`PROFK_ROWS_OUTPUT=none`).
    None,
}

/// The length of the filter's work items.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FilterChunk {
    /// `work_split::filter_chunk`'s rule.
    #[default]
    ByRule,
    /// Items of this many elements, rounded up to a step (`PROFK_FILTER_CHUNK=N`).
    Elements(u64),
    /// One item a block for rows spread over the grid (`PROFK_FILTER_CHUNK=one`).
    OnePerBlock,
}

/// Every choice a benchmark may change; see the module's documentation.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Tuning {
    /// Stages left out of every call.
    pub left_out: LeftOut,
    /// Which algorithm the calls take.
    pub route: ForcedRoute,
    /// Take the composites wider than 64 bits (rows over 2^32 f32 elements) even where 64 bits
    /// suffice, so that tests reach that path with small inputs.
    pub force_wide: bool,
    /// Whether rows too few to fill the device may spread each sample over many blocks (`false`:
    /// one block a row or a cooperative launch, as before the spread sample; `PROFK_SAMPLE=block`).
    pub no_spread_sample: bool,
    /// Sample size of a call of several rows (`PROFK_GPU_SAMPLE`).
    pub sample_rows: Option<u64>,
    /// Sample size of a call of one row (`PROFK_GPU_SAMPLE_ONE`).
    pub sample_one_row: Option<u64>,
    /// The budget of a row whose list is read whole is the call's divided by this
    /// (`PROFK_WHOLE_LIST_EPS_DIV`; 1: the whole budget).
    pub whole_list_eps_div: Option<u64>,
    /// Attempts before the dense fallback, 1 or 2 (`PROFK_ATTEMPTS`).
    pub attempts: Option<u32>,
    /// Length of the filter's work items (`PROFK_FILTER_CHUNK`).
    pub filter_chunk: FilterChunk,
    /// MiB of input the first attempt asks L2 for (`PROFK_PREFETCH_MB`; 0: none).
    pub prefetch_mib: Option<u64>,
    /// Keep one row's pass from counting its kept keys by bin (`PROFK_FILTER_BINS=0`).
    pub no_filter_bins: bool,
    /// Candidates each spread-sample thread keeps (`PROFK_SPREAD_PER`).
    pub spread_per: Option<u64>,
    /// Turn off the sorted lists' launch of few rows (`PROFK_RANK_LIST=0`).
    pub no_rank_list: bool,
    /// Whether each block of that launch reads its row's whole list (`PROFK_RANK_WHOLE=0|1`).
    pub rank_whole: Option<bool>,
    /// Whether the output stage ranks (`PROFK_OUTPUT=rank|sort`).
    pub output_ranking: Option<bool>,
    /// Output places a ranking block takes, 64 or 128 (`PROFK_RANK_SLICE`).
    pub rank_slice: Option<u64>,
    /// Slices of 64 by 512 threads instead of 1024 (`PROFK_RANK_THREADS=512`).
    pub rank_threads_512: bool,
    /// Sort one row's values by the whole composite, not by key alone (`PROFK_VALUE_SORT=whole`).
    pub value_sort_whole: bool,
    /// Onesweep tile of a small one-row sort, 2048 or 1024 keys (`PROFK_SORT_TILE`).
    pub sort_tile: Option<i32>,
    /// Blocks an SM of the dense fallback's launch (`PROFK_FALLBACK_PER_SM`).
    pub fallback_blocks_per_sm: Option<u64>,
    /// Blocks an SM the histogram kernels keep resident (`PROFK_ROWS_PER_SM`).
    pub histogram_blocks_per_sm: Option<u64>,
    /// How the one-block histogram kernel ends (`PROFK_ROWS_OUTPUT`).
    pub histogram_output: HistogramOutput,
    /// Rows in a fixed order instead of dealt from the call's counter (`PROFK_ROWS_DEAL=0`).
    pub histogram_static_rows: bool,
    /// Hand freed memory back to the system at every synchronization (`PROFK_POOL_RELEASE=1`).
    pub pool_release: bool,
    /// No launch overlaps the kernel before it (`PROFK_NO_DEPENDENT_LAUNCH=1`).
    pub no_dependent_launch: bool,
}

impl Tuning {
    /// The tuning of a call that starts now on this thread: the default, or under the `bench`
    /// feature the one [`scoped`] sets.
    #[cfg(feature = "bench")]
    pub fn active() -> Tuning {
        ACTIVE.with(|t| t.get())
    }

    /// The tuning of a call that starts now: always the default without the `bench` feature.
    #[cfg(not(feature = "bench"))]
    #[inline(always)]
    pub fn active() -> Tuning {
        Tuning::default()
    }

    /// The first attempt's sample, threshold, filter and count check, nothing after them.
    pub fn first_attempt_only() -> Tuning {
        Tuning {
            left_out: LeftOut::AFTER_FIRST_ATTEMPT,
            ..Tuning::default()
        }
    }
}

#[cfg(feature = "bench")]
thread_local!(static ACTIVE: std::cell::Cell<Tuning> = std::cell::Cell::new(Tuning::default()));

/// Runs `f` with `tuning` as the tuning of every call it starts on this thread (those made through
/// other crates included), then restores the one before.
#[cfg(feature = "bench")]
pub fn scoped<R>(tuning: Tuning, f: impl FnOnce() -> R) -> R {
    let before = ACTIVE.with(|t| t.replace(tuning));
    let out = f();
    ACTIVE.with(|t| t.set(before));
    out
}
