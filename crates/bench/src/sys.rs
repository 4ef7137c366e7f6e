//! The few system calls std does not wrap: CPU affinity, a parent-death signal for started
//! targets, signalling a whole process group, the open-file limit, and perf counters (hardware
//! events and the kernel's tracepoints). Every `unsafe` block in the crate lives here, each with
//! its invariant written down.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Builds a CPU set from CPU numbers; numbers past the set's capacity are ignored (the spec
/// rejects them first).
fn cpu_set(cpus: &[usize]) -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is a plain bit array; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        if c < libc::CPU_SETSIZE as usize {
            // SAFETY: `c` is below CPU_SETSIZE, so the bit is inside `set`.
            unsafe { libc::CPU_SET(c, &mut set) };
        }
    }
    set
}

/// Arranges for the command's process to start pinned to `cpus` (inherited by every thread
/// and child it creates) and to receive SIGKILL if this process dies without stopping it:
/// a killed `lowlat bench` must not leave a server holding the benchmark's cores.
pub fn prepare_child(cmd: &mut Command, cpus: &[usize]) {
    let set = (!cpus.is_empty()).then(|| cpu_set(cpus));
    // SAFETY: the closure runs in the forked child before exec, where only async-signal-safe
    // calls are allowed; sched_setaffinity and prctl are plain system calls that allocate
    // nothing and take no locks. `set` is moved in by value.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(set) = &set {
                if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            // The death signal follows the thread that forked; the runner forks from the
            // thread that also stops the target, so it fires only when that thread is gone.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Sends `signal` to every process in process group `pgid`.
///
/// # Errors
/// The OS error; `ESRCH` means the group is already gone.
pub fn kill_group(pgid: u32, signal: i32) -> io::Result<()> {
    let pgid =
        libc::pid_t::try_from(pgid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: kill(2) with a negative pid signals a process group; it touches no memory of ours.
    if unsafe { libc::kill(-pgid, signal) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Pins the calling thread to `cpus`.
///
/// # Errors
/// The OS error (e.g. a CPU that does not exist).
pub fn pin_current_thread(cpus: &[usize]) -> io::Result<()> {
    let set = cpu_set(cpus);
    // SAFETY: `set` is a valid cpu_set_t on our stack and its size is passed with it.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The open-file limit (soft, hard) of this process.
#[must_use]
pub fn nofile_limit() -> (u64, u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return (0, 0);
    }
    (lim.rlim_cur, lim.rlim_max)
}

/// Raises the soft open-file limit towards the hard one, enough for `want` descriptors; the
/// started targets inherit it. Returns the soft limit in force afterwards.
#[must_use]
pub fn raise_nofile(want: u64) -> u64 {
    let (soft, hard) = nofile_limit();
    if soft >= want {
        return soft;
    }
    let lim = libc::rlimit {
        rlim_cur: want.min(hard),
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads one rlimit from a struct we own.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } == 0 {
        lim.rlim_cur
    } else {
        soft
    }
}

/// Clock ticks per second of /proc's utime and stime.
#[must_use]
pub fn clock_ticks() -> u64 {
    // SAFETY: sysconf only reads a system constant.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(t).ok().filter(|&t| t > 0).unwrap_or(100)
}

/// Page size, for /proc's page counts.
#[must_use]
pub fn page_size() -> u64 {
    // SAFETY: sysconf only reads a system constant.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
}

/// CPU time (user + system) this process has used so far, in microseconds.
#[must_use]
pub fn self_cpu_us() -> u64 {
    // SAFETY: an all-zero rusage is valid; getrusage fills the struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF covers every thread of this process.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0;
    }
    let us = |t: libc::timeval| {
        u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000 + u64::try_from(t.tv_usec).unwrap_or(0)
    };
    us(ru.ru_utime) + us(ru.ru_stime)
}

/// `struct perf_event_attr` up to its first published size (`PERF_ATTR_SIZE_VER0`, 64 bytes):
/// the kernel reads `size` and treats every later field as zero.
#[repr(C)]
struct PerfEventAttr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    /// Bit 1: `inherit` (threads and children created later count too); bit 6: `exclude_hv`.
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

/// `PERF_FLAG_FD_CLOEXEC` (linux/perf_event.h), which the libc crate does not export.
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

/// What a perf counter counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PerfEvent {
    /// Retired instructions (hardware).
    Instructions,
    /// CPU cycles (hardware).
    Cycles,
    /// CPU time in nanoseconds (software: available where hardware counters are not; the
    /// tests check the counting mechanism with it).
    #[cfg_attr(not(test), allow(dead_code))]
    TaskClock,
    /// How often a kernel tracepoint fired, by its id in tracefs
    /// (`events/raw_syscalls/sys_enter/id`): no hardware counter needed.
    Tracepoint(u64),
}

/// One open perf counter on one thread, counting from the moment it was opened.
#[derive(Debug)]
pub struct PerfCounter(std::fs::File);

/// Opens a counter of `event` on thread `tid`, any CPU, user and kernel work.
///
/// # Errors
/// The `perf_event_open(2)` error: `ENOENT`/`EOPNOTSUPP` where the machine has no such
/// counter (common in VMs), `EACCES`/`EPERM` where `perf_event_paranoid` forbids it.
pub fn perf_counter(tid: i32, event: PerfEvent) -> io::Result<PerfCounter> {
    use std::os::fd::FromRawFd;
    let (kind, config) = match event {
        PerfEvent::Instructions => (0, 1), // PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS
        PerfEvent::Cycles => (0, 0),       // PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES
        PerfEvent::TaskClock => (1, 1),    // PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK
        PerfEvent::Tracepoint(id) => (2, id), // PERF_TYPE_TRACEPOINT
    };
    let attr = PerfEventAttr {
        kind,
        size: 64,
        config,
        sample_period: 0,
        sample_type: 0,
        read_format: 0,
        flags: (1 << 1) | (1 << 6),
        wakeup_events: 0,
        bp_type: 0,
        config1: 0,
    };
    // SAFETY: `attr` is a valid, initialised perf_event_attr of the size it declares and
    // outlives the call; the kernel copies it and keeps no pointer. cpu -1 with a tid counts
    // that thread on any CPU; group -1 makes a counter of its own.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &raw const attr,
            tid,
            -1,
            -1,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(|_| io::Error::other("perf_event_open: fd out of range"))?;
    // SAFETY: the kernel just returned `fd`, an open descriptor nobody else owns.
    Ok(PerfCounter(std::fs::File::from(unsafe {
        std::os::fd::OwnedFd::from_raw_fd(fd)
    })))
}

impl PerfCounter {
    /// The count so far: for a counter opened with `inherit`, the thread's own and that of every
    /// thread and process it started since, running or exited.
    ///
    /// # Errors
    /// The `read(2)` error.
    pub fn value(&self) -> io::Result<u64> {
        use std::io::Read as _;
        let mut buf = [0u8; 8];
        // One read(2) of the counter's 8 bytes (read_format 0: the value alone).
        (&self.0).read_exact(&mut buf)?;
        Ok(u64::from_ne_bytes(buf))
    }
}

#[cfg(test)]
mod perf_tests {
    use super::*;

    /// The counter mechanism, on a software event every Linux has: this thread's CPU time grows
    /// while it works. (Hardware events use the same path; many VMs do not offer them.)
    #[test]
    fn task_clock_counts_this_thread() {
        let c = match perf_counter(0, PerfEvent::TaskClock) {
            Ok(c) => c,
            // perf_event_paranoid forbids even software counters: nothing to test here.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => return,
            Err(e) => panic!("{e}"),
        };
        let before = c.value().unwrap();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let after = c.value().unwrap();
        assert!(after > before + 1_000_000, "{before} → {after} ns");
    }
}
