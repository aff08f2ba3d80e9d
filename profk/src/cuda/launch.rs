//! Device memory and launch helpers shared by the kernel-family wrappers.
//!
//! A call's temporary buffers are carved from one workspace per stream that is kept between calls
//! (like a caching allocator): no allocation, event creation or event record per buffer, which
//! would otherwise cost more host time than the kernels of a small call take on the device.
use candle_core::cuda::cudarc::driver::{
    result,
    sys::{self, CUdevice_attribute, CUlaunchAttributeID, CUstreamCaptureStatus},
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DeviceRepr,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::{collections::HashMap, ffi::c_void, marker::PhantomData};

use super::module::{function, Family};
use crate::{tuning::Tuning, Error, Result};

/// A typed range of the workspace: a raw device pointer and a length.
#[derive(Debug)]
pub struct Dev<T> {
    pub ptr: u64,
    pub len: usize,
    _t: PhantomData<T>,
}

impl<T> Dev<T> {
    /// A range the caller owns elsewhere.
    pub fn at(ptr: u64, len: usize) -> Self {
        Self {
            ptr,
            len,
            _t: PhantomData,
        }
    }
}

impl<T> Clone for Dev<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Dev<T> {}

struct Workspace {
    slice: CudaSlice<u8>,
    ptr: u64,
}

/// What names a stream to the per-stream caches: its handle, and for the per-thread default stream
/// (candle's: one handle, a different stream on every thread) the thread too, so that memory a call
/// queued work on is reused only in that work's stream order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StreamKey(usize, Option<std::thread::ThreadId>);

/// The per-thread default stream's handle (`CU_STREAM_PER_THREAD`).
const PER_THREAD_STREAM: usize = 0x2;

impl StreamKey {
    pub fn of(stream: &CudaStream) -> Self {
        let handle = stream.cu_stream() as usize;
        let thread = (handle == PER_THREAD_STREAM).then(|| std::thread::current().id());
        Self(handle, thread)
    }
}

fn cache() -> &'static Mutex<HashMap<StreamKey, Workspace>> {
    static C: OnceLock<Mutex<HashMap<StreamKey, Workspace>>> = OnceLock::new();
    C.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The buffers of one call, carved from the stream's workspace; gives it back when dropped.
pub struct Arena {
    pub stream: Arc<CudaStream>,
    pub sms: u32,
    /// Whether launches may overlap the kernel before them ([`Arena::launch`]).
    dependent: bool,
    /// Whether a selection may run as one cooperative launch: the device has them and the stream
    /// is not being captured.
    pub cooperative: bool,
    /// Whether the stream is being captured into a graph.
    pub capturing: bool,
    /// The benchmark's choices for this call ([`Tuning::default`] in production).
    pub tuning: Tuning,
    /// Bytes this call carved: its auxiliary device memory.
    pub bytes: usize,
    key: StreamKey,
    chunks: Vec<Workspace>,
    off: usize,
}

const ALIGN: usize = 256;

impl Arena {
    pub fn new(stream: Arc<CudaStream>, tuning: Tuning) -> Result<Self> {
        let facts = device_facts(stream.context(), &tuning)?;
        let capturing = stream.capture_status().map_err(drv)?
            != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let key = StreamKey::of(&stream);
        let chunks = cache()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key)
            .into_iter()
            .collect();
        Ok(Self {
            stream,
            sms: facts.sms,
            dependent: facts.dependent_launch && !capturing && !tuning.no_dependent_launch,
            cooperative: facts.cooperative && !capturing,
            capturing,
            tuning,
            bytes: 0,
            key,
            chunks,
            off: 0,
        })
    }

    /// Uninitialized device memory for `len` elements (at least one).
    pub fn alloc<T>(&mut self, len: usize) -> Result<Dev<T>> {
        let bytes = (len.max(1) * std::mem::size_of::<T>()).next_multiple_of(ALIGN);
        self.bytes += bytes;
        let fits = self
            .chunks
            .last()
            .is_some_and(|c| self.off + bytes <= c.slice.len());
        if !fits {
            let total: usize = self.chunks.iter().map(|c| c.slice.len()).sum();
            let size = bytes.max(total).max(1 << 20);
            // SAFETY: workspace memory is written by a kernel or a memset before it is read.
            let slice = unsafe { self.stream.alloc::<u8>(size) }.map_err(drv)?;
            let ptr = slice.device_ptr(&self.stream).0;
            self.chunks.push(Workspace { slice, ptr });
            self.off = 0;
        }
        let c = self.chunks.last().expect("a chunk fits");
        let ptr = c.ptr + self.off as u64;
        self.off += bytes;
        Ok(Dev {
            ptr,
            len: len.max(1),
            _t: PhantomData,
        })
    }

    /// Zeroed device memory.
    pub fn zeros<T>(&mut self, len: usize) -> Result<Dev<T>> {
        let d = self.alloc::<T>(len)?;
        // SAFETY: the range lies inside a live workspace chunk; the memset is ordered on the
        // stream.
        unsafe {
            result::memset_d8_async(
                d.ptr,
                0,
                d.len * std::mem::size_of::<T>(),
                self.stream.cu_stream(),
            )
        }
        .map_err(drv)?;
        Ok(d)
    }

    pub fn func(&self, family: Family, name: &str) -> Result<CudaFunction> {
        function(self.stream.context(), family, name)
    }

    /// Blocks of `f` (`block` threads, no dynamic shared memory) resident on one SM at once, asked
    /// of the driver once per kernel.
    pub fn blocks_per_sm(&self, f: &CudaFunction, block: u32) -> Result<u32> {
        static CACHE: OnceLock<Mutex<HashMap<(usize, u32), u32>>> = OnceLock::new();
        let key = (f.cu_function() as usize, block);
        let cache = CACHE.get_or_init(Default::default);
        if let Some(&b) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(b);
        }
        let b = f
            .occupancy_max_active_blocks_per_multiprocessor(block, 0, None)
            .map_err(drv)?;
        cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, b);
        Ok(b)
    }

    /// Launches `name` with one struct argument.
    pub fn launch_struct<A: DeviceRepr>(
        &self,
        family: Family,
        name: &str,
        grid: u64,
        block: u32,
        args: &A,
    ) -> Result<()> {
        let mut p = Params::default();
        p.push(args);
        // SAFETY: the argument record mirrors the kernel's parameter struct (abi.rs).
        unsafe { self.launch(&self.func(family, name)?, grid, block, &p, false) }
    }

    /// Launches `name` with scalar arguments (pointers as u64, `int` parameters as i32).
    pub fn launch_args(
        &self,
        family: Family,
        name: &str,
        grid: u64,
        block: u32,
        args: &[Arg],
    ) -> Result<()> {
        let mut p = Params::default();
        for a in args {
            match a {
                Arg::U64(v) => p.push(v),
                Arg::I32(v) => p.push(v),
                Arg::U32(v) => p.push(v),
            };
        }
        // SAFETY: each caller passes the kernel's parameters in order and width.
        unsafe { self.launch(&self.func(family, name)?, grid, block, &p, false) }
    }

    /// Launches `f` on the call's stream (cooperatively: every block resident at once, the grid may
    /// synchronize). On devices of compute capability 9.0 and later, outside a stream capture, the
    /// launch lets the kernel's blocks be placed while the kernel before it still runs
    /// (programmatic dependent launch); every kernel of this crate first waits for that kernel
    /// (kernels/common.cuh `dependent_launch_entry`), so only the launch latency overlaps. A driver
    /// that refuses the attribute on a cooperative launch gets plain cooperative launches from then
    /// on.
    ///
    /// # Safety `params` are `f`'s parameters in order and width, and the grid of a cooperative
    /// launch fits the device at once.
    pub unsafe fn launch(
        &self,
        f: &CudaFunction,
        grid: u64,
        block: u32,
        params: &Params,
        cooperative: bool,
    ) -> Result<()> {
        static COOPERATIVE_DEPENDENT: AtomicBool = AtomicBool::new(true);
        let dependent =
            self.dependent && (!cooperative || COOPERATIVE_DEPENDENT.load(Ordering::Relaxed));
        let first = launch_ex(&self.stream, f, grid, block, params, cooperative, dependent);
        match first {
            Err(_) if cooperative && dependent => {
                COOPERATIVE_DEPENDENT.store(false, Ordering::Relaxed);
                launch_ex(&self.stream, f, grid, block, params, true, false)
            }
            r => r,
        }
    }

    /// A grid-stride launch over `total` items: enough blocks to fill the device, never more than
    /// needed.
    pub fn grid_for(&self, total: u64, block: u32, per_sm: u32) -> u64 {
        total
            .div_ceil(block as u64)
            .clamp(1, (self.sms * per_sm) as u64)
    }
}

impl Drop for Arena {
    /// Keeps one workspace of the whole size for the next call on this stream.
    fn drop(&mut self) {
        let total: usize = self.chunks.iter().map(|c| c.slice.len()).sum();
        let keep = if self.chunks.len() == 1 {
            self.chunks.pop()
        } else {
            self.chunks.clear();
            // SAFETY: as in alloc.
            unsafe { self.stream.alloc::<u8>(total) }.ok().map(|slice| {
                let ptr = slice.device_ptr(&self.stream).0;
                Workspace { slice, ptr }
            })
        };
        if let Some(w) = keep {
            cache()
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(self.key, w);
        }
    }
}

#[derive(Clone, Copy)]
pub enum Arg {
    U64(u64),
    I32(i32),
    U32(u32),
}

/// What a call needs to know of its device, asked of the driver once per device.
#[derive(Clone, Copy)]
struct DeviceFacts {
    sms: u32,
    /// Compute capability 9.0 or later: launches may overlap the kernel before them.
    dependent_launch: bool,
    cooperative: bool,
}

/// The facts of `ctx`'s device; the first call for a device also keeps its pool's memory
/// ([`keep_pool_memory`]) unless its tuning says otherwise.
fn device_facts(ctx: &Arc<CudaContext>, tuning: &Tuning) -> Result<DeviceFacts> {
    static CACHE: OnceLock<Mutex<HashMap<i32, DeviceFacts>>> = OnceLock::new();
    let device = ctx.cu_device();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(&f) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&device) {
        return Ok(f);
    }
    let attribute = |a| ctx.attribute(a).map_err(drv);
    let facts = DeviceFacts {
        sms: attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
        dependent_launch: attribute(
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
        )? >= 9,
        cooperative: attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH)? != 0,
    };
    if !tuning.pool_release {
        keep_pool_memory(device)?;
    }
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(device, facts);
    Ok(facts)
}

/// Keeps the memory freed into the device's default pool there, instead of handing it back to the
/// system at every synchronization (the pool's default). The outputs of a call come from that pool:
/// handed back, a call after a synchronization maps fresh pages for them, which for outputs of tens
/// of megabytes costs more than the selection. Like PyTorch's caching allocator, the pool then
/// keeps what the process has used.
fn keep_pool_memory(device: sys::CUdevice) -> Result<()> {
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    let mut keep = u64::MAX;
    // SAFETY: `pool` receives the device's default pool, which lives as long as the device; the
    // attribute's value is a u64.
    unsafe {
        sys::cuDeviceGetDefaultMemPool(&mut pool, device)
            .result()
            .map_err(drv)?;
        sys::cuMemPoolSetAttribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut keep as *mut u64).cast::<c_void>(),
        )
        .result()
        .map_err(drv)
    }
}

/// A kernel's parameters by value, in order: cuLaunchKernelEx copies each from its address.
#[derive(Default)]
pub struct Params(Vec<Vec<u64>>);

impl Params {
    /// Appends one parameter (a scalar, a device pointer as u64, or an argument record).
    pub fn push<T: DeviceRepr>(&mut self, v: &T) -> &mut Self {
        let bytes = std::mem::size_of::<T>();
        let mut words = vec![0u64; bytes.div_ceil(8).max(1)];
        // SAFETY: `words` holds at least `bytes` bytes, and DeviceRepr types are plain data.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (v as *const T).cast::<u8>(),
                words.as_mut_ptr().cast::<u8>(),
                bytes,
            )
        };
        self.0.push(words);
        self
    }
}

#[cfg(feature = "bench")]
thread_local! {
    /// When this thread last launched a kernel while a benchmark watched for it
    /// ([`watch_first_launch`]): the host time a call takes before the device has work.
    static FIRST_LAUNCH: std::cell::Cell<Option<std::time::Instant>> = const { std::cell::Cell::new(None) };
    static WATCHING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Starts (`true`) or ends watching for this thread's next kernel launch; ending returns when it
/// was launched.
#[cfg(feature = "bench")]
pub fn watch_first_launch(on: bool) -> Option<std::time::Instant> {
    WATCHING.with(|w| w.set(on));
    FIRST_LAUNCH.with(|f| f.take())
}

fn launch_ex(
    stream: &CudaStream,
    f: &CudaFunction,
    grid: u64,
    block: u32,
    params: &Params,
    cooperative: bool,
    dependent: bool,
) -> Result<()> {
    let set = |id: CUlaunchAttributeID| {
        // SAFETY: the attribute value is a plain C union; zero is a valid pattern.
        let mut a: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        a.id = id;
        // Both attributes take an int flag at the start of the union.
        a.value.cooperative = 1;
        a
    };
    let mut attrs = Vec::with_capacity(2);
    if cooperative {
        attrs.push(set(CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_COOPERATIVE));
    }
    if dependent {
        attrs.push(set(
            CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
        ));
    }
    let config = sys::CUlaunchConfig {
        gridDimX: grid.clamp(1, i32::MAX as u64) as u32,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: block,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: 0,
        hStream: stream.cu_stream(),
        attrs: attrs.as_mut_ptr(),
        numAttrs: attrs.len() as u32,
    };
    let mut ptrs: Vec<*mut c_void> = params.0.iter().map(|w| w.as_ptr() as *mut c_void).collect();
    stream.context().bind_to_thread().map_err(drv)?;
    #[cfg(feature = "bench")]
    if WATCHING.with(|w| w.get()) {
        FIRST_LAUNCH.with(|f| {
            if f.get().is_none() {
                f.set(Some(std::time::Instant::now()))
            }
        });
    }
    // SAFETY: the caller vouches for the parameters and the grid; every pointer in `ptrs` and
    // `attrs` outlives the call, which copies them.
    unsafe {
        sys::cuLaunchKernelEx(
            &config,
            f.cu_function(),
            ptrs.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
    .result()
    .map_err(drv)
}

pub fn drv(e: impl std::fmt::Debug) -> Error {
    Error::Param(format!("CUDA driver: {e:?}"))
}
