//! What `bench` and `soak` read from /proc: a process's CPU time (all its threads) and peak
//! RSS, and the machine's busy CPU time, to tell how much of a phase's CPU went to other work.

use std::fs;
use std::sync::OnceLock;

/// Clock ticks per second of the `stat` files (`getconf CLK_TCK`; 100 on Linux in practice).
fn ticks_per_second() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse::<f64>().ok())
            .filter(|t| *t > 0.0)
            .unwrap_or(100.0)
    })
}

/// utime + stime in ticks from the text of `/proc/<pid>/stat`. The command name (field 2) is
/// in parentheses and may hold spaces or parentheses, so fields are counted after the last `)`.
pub(crate) fn stat_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, utime field 14 and stime field 15 (proc(5)).
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// CPU seconds (user + system, every thread) the process used so far; `None` once it is gone.
pub(crate) fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(stat_ticks(&stat)? as f64 / ticks_per_second())
}

/// The name (`comm`, at most 15 bytes) in the text of a `stat` file: between the first `(` and
/// the last `)`.
pub(crate) fn stat_name(stat: &str) -> Option<&str> {
    Some(&stat[stat.find('(')? + 1..stat.rfind(')')?])
}

/// Each live thread of process `pid`: its name and the CPU seconds it used so far, from
/// `/proc/<pid>/task/*/stat`. Threads that already ended are not listed (their time is in
/// [`cpu_seconds`] only).
pub(crate) fn thread_cpu_seconds(pid: u32) -> Vec<(String, f64)> {
    thread_cpu_seconds_by_id(pid).into_values().collect()
}

/// Each live thread of process `pid` by thread id: its name and the CPU seconds it used so far.
/// Names repeat (librdkafka names every broker thread alike), ids do not.
pub(crate) fn thread_cpu_seconds_by_id(pid: u32) -> std::collections::BTreeMap<u32, (String, f64)> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else { return Default::default() };
    tasks
        .filter_map(|task| {
            let task = task.ok()?;
            let tid = task.file_name().to_str()?.parse::<u32>().ok()?;
            let stat = fs::read_to_string(task.path().join("stat")).ok()?;
            Some((tid, (stat_name(&stat)?.to_owned(), stat_ticks(&stat)? as f64 / ticks_per_second())))
        })
        .collect()
}

/// This process's CPU seconds.
pub(crate) fn own_cpu_seconds() -> f64 {
    cpu_seconds(std::process::id()).unwrap_or(0.0)
}

/// `VmHWM` (peak resident set size) in bytes from the text of `/proc/<pid>/status`.
pub(crate) fn status_vmhwm(status: &str) -> Option<u64> {
    let kb = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?.trim().strip_suffix("kB")?.trim();
    Some(kb.parse::<u64>().ok()? * 1024)
}

/// Peak RSS of a live process, in bytes (0 once it is gone).
pub(crate) fn peak_rss(pid: u32) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status")).ok().as_deref().and_then(status_vmhwm).unwrap_or(0)
}

/// CPU seconds the whole machine spent busy (all cores; everything but idle and iowait).
pub(crate) fn machine_busy_seconds() -> f64 {
    let stat = fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(cpu) = stat.lines().find(|l| l.starts_with("cpu ")) else { return 0.0 };
    let v: Vec<u64> = cpu.split_whitespace().skip(1).filter_map(|f| f.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let busy: u64 = v.iter().take(8).enumerate().filter(|(i, _)| *i != 3 && *i != 4).map(|(_, t)| t).sum();
    busy as f64 / ticks_per_second()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_count_fields_after_the_name() {
        // A real line of /proc/<pid>/stat, with a name holding a space and a parenthesis.
        let stat = "4242 (orders (x) y) S 1 4242 4242 0 -1 4194560 2786 0 0 0 1234 567 0 0 20 0 9 0 \
                    3337 1066065920 8300 18446744073709551615 1 1 0 0 0 0 0 4096 17630 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(stat_ticks(stat), Some(1234 + 567));
        assert_eq!(stat_name(stat), Some("orders (x) y"));
        assert_eq!(stat_ticks("garbage"), None);
        assert_eq!(stat_name("garbage"), None);
    }

    #[test]
    fn vmhwm_is_read_in_bytes() {
        let status = "Name:\torders\nVmPeak:\t 1041080 kB\nVmHWM:\t   33200 kB\nVmRSS:\t   30100 kB\n";
        assert_eq!(status_vmhwm(status), Some(33_200 * 1024));
        assert_eq!(status_vmhwm("Name:\tx\n"), None);
    }

    #[test]
    fn this_process_is_visible() {
        assert!(peak_rss(std::process::id()) > 0);
        assert!(machine_busy_seconds() > 0.0);
    }
}
