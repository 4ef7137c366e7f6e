//! The few system calls std and mio do not wrap: a thread's CPU time, CPU affinity, the
//! descriptor limit, and a nanosecond timer for rate mode; and for `-s` scripts a Lua state with
//! every standard library and [`RawCall`], the call made per request and per response through
//! LuaJIT's C API. Every `unsafe` block of the crate lives here.
//!
//! Why a timerfd: mio's `poll` timeout has millisecond resolution (rounded up), and in rate mode
//! a send that leaves up to 1 ms late is 1 ms of latency charged to the server, since latency is
//! measured from the schedule. A timerfd armed to the next scheduled send wakes the loop within
//! tens of microseconds instead.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Datagrams [`recv_datagrams`] reads in one call at most.
pub(crate) const RECV_BATCH: usize = 32;

/// Reads up to [`RECV_BATCH`] datagrams waiting on the UDP socket `fd` with one `recvmmsg`
/// (non-blocking): datagram `i` lands in `buf[i * slot..]`, its length in `lens[i]` (0 for one
/// longer than `slot`, truncated and to be dropped). Returns how many were read.
///
/// # Errors
/// The socket's error (`WouldBlock` when nothing waits).
pub(crate) fn recv_datagrams(
    fd: RawFd,
    buf: &mut [u8],
    slot: usize,
    lens: &mut [usize; RECV_BATCH],
) -> io::Result<usize> {
    let n = RECV_BATCH.min(buf.len() / slot.max(1));
    // SAFETY: all-zero iovec and mmsghdr values are valid (null pointers, zero lengths).
    let mut iov: [libc::iovec; RECV_BATCH] = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut msgs: [libc::mmsghdr; RECV_BATCH] = unsafe { std::mem::zeroed() };
    for (i, chunk) in buf.chunks_exact_mut(slot).take(n).enumerate() {
        iov[i].iov_base = chunk.as_mut_ptr().cast();
        iov[i].iov_len = slot;
        msgs[i].msg_hdr.msg_iov = &raw mut iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: `msgs[..n]` each point at one iovec covering a distinct `slot`-byte part of
    // `buf`, which outlives the call; no addresses or control data are asked for (the socket is
    // connected); `n` ≤ the array's length.
    let rc = unsafe {
        libc::recvmmsg(
            fd,
            msgs.as_mut_ptr(),
            u32::try_from(n).unwrap_or(0),
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let got = usize::try_from(rc).unwrap_or(0);
    for i in 0..got {
        let truncated = msgs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        lens[i] = if truncated {
            0
        } else {
            msgs[i].msg_len as usize
        };
    }
    Ok(got)
}

/// User and system CPU time consumed so far by the calling thread.
pub(crate) fn thread_cpu_time() -> (Duration, Duration) {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `usage` is a valid, writable `rusage`; RUSAGE_THREAD only reads the calling
    // thread's accounting. On failure (impossible for these arguments) it stays zeroed.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, usage.as_mut_ptr()) };
    if rc != 0 {
        return (Duration::ZERO, Duration::ZERO);
    }
    // SAFETY: zero-initialised above and possibly filled in by getrusage: valid either way.
    let usage = unsafe { usage.assume_init() };
    let tv = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    };
    (tv(usage.ru_utime), tv(usage.ru_stime))
}

/// Raises the soft limit on open descriptors to the hard one (best effort) and returns the soft
/// limit now in force.
pub(crate) fn raise_fd_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write the struct they are given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut lim) != 0 {
            return u64::MAX; // Unknown: let the connects report what fails.
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raw const raised) == 0 {
                lim = raised;
            }
        }
    }
    lim.rlim_cur
}

/// CPUs the machine has (online or not), whatever this process's own affinity; at least 1.
pub(crate) fn cpus_configured() -> usize {
    // SAFETY: sysconf reads a system setting.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
    usize::try_from(n).unwrap_or(usize::MAX).max(1)
}

/// Pins the calling thread to one CPU.
pub(crate) fn pin_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "CPU number out of range",
        ));
    }
    // SAFETY: an all-zero cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` was checked to be below CPU_SETSIZE, the capacity of `set`.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A CLOCK_MONOTONIC timerfd, non-blocking, for registering with the event loop.
pub(crate) struct TimerFd {
    fd: OwnedFd,
}

impl TimerFd {
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: plain system call with constant flags; the result is checked below.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a freshly created descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Self { fd })
    }

    /// Fires once, `after` from now (at least 1 ns: zero would disarm it).
    pub(crate) fn arm(&self, after: Duration) -> io::Result<()> {
        let after = after.max(Duration::from_nanos(1));
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: libc::time_t::try_from(after.as_secs()).unwrap_or(libc::time_t::MAX),
                tv_nsec: libc::c_long::from(after.subsec_nanos()),
            },
        };
        // SAFETY: `self.fd` is an open timerfd; `spec` is a valid itimerspec; a null old value
        // is allowed.
        let rc =
            unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

/// A Lua state (LuaJIT) with every standard library, `debug`, `ffi` and `jit` included, as wrk
/// opens them (`luaL_openlibs`) for its scripts.
pub(crate) fn lua_with_all_libraries() -> mlua::Lua {
    // SAFETY: mlua calls `debug` and `ffi` unsafe because a script using them can break memory
    // safety (poke memory, call C). The script is the user's own program, run with the user's
    // rights as wrk runs it, and wrk's scripts may use these libraries; mlua's own API stays
    // sound on a state that has them.
    unsafe { mlua::Lua::unsafe_new_with(mlua::StdLib::ALL, mlua::LuaOptions::new()) }
}

/// A Lua function called through LuaJIT's C API rather than mlua's `Function::call`, for the
/// calls a script's loop makes per request and per response (`request()`, `response()`).
/// mlua's call moves the function in from its reference thread, pushes its own traceback
/// handler, and turns every result into a handle of its own; this one pushes the function and a
/// message handler from the registry, calls, and lends the result where it lies on the stack.
/// An empty `request()` cost 818 instructions per call over no script through mlua, 698 this
/// way; wrk's counter.lua 9146 → 8127 per request, all else alike (callgrind, docs/PERFORMANCE.md,
/// "Lua scripts").
///
/// Invariant: the state is used by one thread at a time. A `RawCall` lives beside the mlua
/// `Lua` it was made from (in the same `ThreadScript`), which keeps the state open and is moved
/// with it; calls leave the stack as they found it, so mlua's own use of the state between them
/// sees nothing of them.
pub(crate) struct RawCall {
    state: std::ptr::NonNull<mlua::lua_State>,
    function: std::ffi::c_int,
    handler: std::ffi::c_int,
}

// SAFETY: the pointer is only dereferenced through `call`, by the one thread that owns the
// `ThreadScript` holding both this and the `Lua` the state belongs to (mlua's `send` feature
// makes that `Lua` Send on the same terms); the state is never used from two threads at once.
unsafe impl Send for RawCall {}

/// What a [`RawCall`] returned, borrowed from the Lua stack for the length of the callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RawValue<'a> {
    Nil,
    Bool(bool),
    Str(&'a [u8]),
    /// A table: its first element, when it is a string (`wrk.lua`'s `{ type name }`).
    Table(Option<&'a [u8]>),
    Other,
}

impl RawCall {
    /// `function`, to be called with `handler` as its message handler (both kept in the state's
    /// registry for as long as the state lives).
    ///
    /// # Errors
    /// When the state cannot hold the references (out of memory).
    pub fn new(
        lua: &mlua::Lua,
        function: &mlua::Function,
        handler: &mlua::Function,
    ) -> mlua::Result<Self> {
        let mut state = std::ptr::null_mut();
        let mut refs = (0, 0);
        // SAFETY: `exec_raw` pushes the two functions and runs the closure on the locked state;
        // `luaL_ref` pops the value on top into the registry (the handler, then the function).
        unsafe {
            lua.exec_raw::<()>((function, handler), |l| {
                state = l;
                refs.1 = mlua::ffi::luaL_ref(l, mlua::ffi::LUA_REGISTRYINDEX);
                refs.0 = mlua::ffi::luaL_ref(l, mlua::ffi::LUA_REGISTRYINDEX);
            })?;
        }
        let state = std::ptr::NonNull::new(state)
            .ok_or_else(|| mlua::Error::runtime("no Lua state to call into"))?;
        Ok(Self {
            state,
            function: refs.0,
            handler: refs.1,
        })
    }

    /// Calls the function with `arg` (a status code) or no argument, and hands its one result to
    /// `read`; `None` when the call raised an error (the handler has kept it).
    pub fn call<R>(&self, arg: Option<u16>, read: impl FnOnce(RawValue<'_>) -> R) -> Option<R> {
        use mlua::ffi;
        let l = self.state.as_ptr();
        // SAFETY: `l` is a live state used by this thread alone (the invariant above). Four
        // slots are made sure of before pushing the handler, the function, the argument; the
        // result's bytes are read before `lua_settop` pops it, and the stack is left at `top`
        // on every path.
        unsafe {
            let top = ffi::lua_gettop(l);
            if ffi::lua_checkstack(l, 4) == 0 {
                return None;
            }
            ffi::lua_rawgeti_(l, ffi::LUA_REGISTRYINDEX, self.handler);
            ffi::lua_rawgeti_(l, ffi::LUA_REGISTRYINDEX, self.function);
            let nargs = match arg {
                Some(a) => {
                    ffi::lua_pushinteger(l, ffi::lua_Integer::from(a));
                    1
                }
                None => 0,
            };
            if ffi::lua_pcall(l, nargs, 1, top + 1) != 0 {
                ffi::lua_settop(l, top);
                return None;
            }
            let string_at = |idx| {
                let mut len = 0usize;
                let p = ffi::lua_tolstring(l, idx, &mut len);
                (!p.is_null()).then(|| std::slice::from_raw_parts(p.cast::<u8>(), len))
            };
            let value = match ffi::lua_type(l, -1) {
                ffi::LUA_TNIL => RawValue::Nil,
                ffi::LUA_TBOOLEAN => RawValue::Bool(ffi::lua_toboolean(l, -1) != 0),
                ffi::LUA_TSTRING => string_at(-1).map_or(RawValue::Other, RawValue::Str),
                ffi::LUA_TTABLE => {
                    ffi::lua_rawgeti_(l, -1, 1);
                    let first = if ffi::lua_type(l, -1) == ffi::LUA_TSTRING {
                        string_at(-1)
                    } else {
                        None
                    };
                    RawValue::Table(first)
                }
                _ => RawValue::Other,
            };
            let out = read(value);
            ffi::lua_settop(l, top);
            Some(out)
        }
    }
}

impl AsRawFd for TimerFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_grows() {
        let (u0, s0) = thread_cpu_time();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let (u1, s1) = thread_cpu_time();
        assert!(u1 + s1 > u0 + s0);
    }

    #[test]
    fn timer_arms() {
        let t = TimerFd::new().unwrap();
        t.arm(Duration::from_micros(100)).unwrap();
    }
}
