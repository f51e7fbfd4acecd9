//! What every vCPU was doing when a QEMU run ran out of time: the host-side hang probe.
//!
//! A probed run starts QEMU with a QMP socket ([`Probe::qemu_args`]). When the run passes its time
//! limit (or stalls), [`Probe::report`] runs before QEMU is killed: it stops the machine, asks
//! QEMU's monitor for every vCPU's registers (`info registers -a`), walks each vCPU's chain of
//! frame records (every build forces frame pointers) by reading memory through that vCPU's own
//! translation (`x /2gx`), and names each code address with the kernel ELF's symbols or a user
//! program's (a program is placed by the kernel's `domain N NAME: started at ADDR` log line, its
//! entry point after relocation). It needs nothing from the guest kernel, so it works with every
//! CPU spinning with interrupts off, unlike a kernel-side dump. Nothing read from the guest is
//! trusted: a failed read or a chain that does not climb the stack only ends that backtrace, and
//! every QMP read has a time limit, so a wedged QEMU cannot hold up the harness.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::arch::Arch;
use crate::build::Artifacts;

/// What every line of a report starts with (the suites' checks look for it).
pub const PREFIX: &str = tsumugi_tests::suites::HANG_PROBE;
/// Frames of a backtrace after the one the PC is in.
pub const MAX_FRAMES: usize = 24;
/// How long one QMP exchange may take.
const QMP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long QEMU may take to open its QMP socket after starting.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The kernel's log line announcing a program: `domain <id> <name>: started at <entry>`.
const STARTED_AT: &str = ": started at 0x";

/// A QEMU run that can be asked, before it is killed, what its vCPUs are doing.
#[derive(Debug)]
pub struct Probe {
    /// QEMU's QMP socket (removed on drop).
    socket: PathBuf,
    /// Kernel ELF.
    kernel: PathBuf,
    /// User program ELFs, by name.
    programs: Vec<(String, PathBuf)>,
}

impl Probe {
    /// A probe for one QEMU run of the build `artifacts`, with a fresh socket path.
    pub fn new(artifacts: &Artifacts) -> Probe {
        static RUNS: AtomicU32 = AtomicU32::new(0);
        let socket = std::env::temp_dir().join(format!(
            "tsumugi-qmp-{}-{}.sock",
            std::process::id(),
            RUNS.fetch_add(1, Ordering::Relaxed)
        ));
        // A file left by an earlier xtask with the same pid would make QEMU refuse to start.
        let _ = std::fs::remove_file(&socket);
        Probe { socket, kernel: artifacts.kernel.clone(), programs: artifacts.programs.clone() }
    }

    /// The QEMU arguments that open the socket (QEMU does not wait for a client).
    pub fn qemu_args(&self) -> [String; 2] {
        ["-qmp".to_string(), format!("unix:{},server=on,wait=off", self.socket.display())]
    }

    /// Stops the machine and describes every vCPU, one `hang probe: ` line each thing; `log` is
    /// the console so far (for where the programs were loaded). Never fails: what could not be
    /// had is said in the report.
    pub fn report(&self, arch: Arch, log: &str) -> String {
        let mut lines = Vec::new();
        if let Err(error) = self.probe(arch, log, &mut lines) {
            lines.push(format!("could not finish: {error:#}"));
        }
        lines.iter().map(|line| format!("{PREFIX}{line}\n")).collect()
    }

    fn probe(&self, arch: Arch, log: &str, lines: &mut Vec<String>) -> Result<()> {
        let mut qmp = Qmp::connect(&self.socket)?;
        qmp.execute("stop", json!({}))?;
        let registers = qmp.hmp("info registers -a", None)?;
        let vcpus = parse_registers(arch, &registers);
        if vcpus.is_empty() {
            bail!("no vCPU in QEMU's `info registers -a` answer: {registers:?}");
        }
        let (images, problems) = images(&self.kernel, &self.programs, log);
        lines.push(format!(
            "QEMU stopped at the time limit; {} vCPU(s), code named from {}",
            vcpus.len(),
            images.iter().map(|image| image.label.as_str()).collect::<Vec<_>>().join(", ")
        ));
        lines.extend(problems);
        for vcpu in &vcpus {
            let mut chain = frame_chain(arch, vcpu, |addr| qmp.read_pair(vcpu.index, addr));
            if arch == Arch::X86_64 {
                let offset = function_offset(&images, vcpu.pc);
                if let Some(ret) = x86_entry_return(vcpu, offset, |addr| qmp.read_pair(vcpu.index, addr)) {
                    chain.insert(0, ret);
                }
            }
            lines.extend(describe(vcpu, &chain, &images));
        }
        Ok(())
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// A QMP connection (one JSON object a line each way).
struct Qmp {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
}

impl Qmp {
    /// Connects (waiting a little for QEMU to open the socket), reads the greeting and leaves
    /// capabilities negotiation.
    fn connect(socket: &Path) -> Result<Qmp> {
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        let stream = loop {
            match UnixStream::connect(socket) {
                Ok(stream) => break stream,
                Err(error) if Instant::now() >= deadline => {
                    return Err(error).with_context(|| format!("connecting to QEMU's QMP socket {}", socket.display()))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        stream.set_read_timeout(Some(QMP_TIMEOUT))?;
        stream.set_write_timeout(Some(QMP_TIMEOUT))?;
        let mut qmp = Qmp { writer: stream.try_clone()?, reader: BufReader::new(stream) };
        let greeting = qmp.read_message()?;
        if greeting.get("QMP").is_none() {
            bail!("QEMU's QMP socket greeted with {greeting}");
        }
        qmp.execute("qmp_capabilities", json!({}))?;
        Ok(qmp)
    }

    fn read_message(&mut self) -> Result<Value> {
        let mut line = String::new();
        if self.reader.read_line(&mut line).context("reading QMP")? == 0 {
            bail!("QEMU closed its QMP socket");
        }
        serde_json::from_str(&line).with_context(|| format!("QMP sent {line:?}"))
    }

    /// Runs a command and returns its `return` value (events in between are skipped).
    fn execute(&mut self, command: &str, arguments: Value) -> Result<Value> {
        let request = json!({ "execute": command, "arguments": arguments });
        writeln!(self.writer, "{request}").context("writing QMP")?;
        loop {
            let mut message = self.read_message()?;
            if let Some(error) = message.get("error") {
                bail!("QMP {command}: {error}");
            }
            if let Some(value) = message.get_mut("return") {
                return Ok(value.take());
            }
        }
    }

    /// Runs a human-monitor command, on vCPU `cpu` if given; returns its text.
    fn hmp(&mut self, line: &str, cpu: Option<usize>) -> Result<String> {
        let mut arguments = json!({ "command-line": line });
        if let Some(cpu) = cpu {
            arguments["cpu-index"] = json!(cpu);
        }
        let value = self.execute("human-monitor-command", arguments)?;
        Ok(value.as_str().unwrap_or_default().to_string())
    }

    /// The two 64-bit words at virtual address `addr` as vCPU `cpu` translates it.
    fn read_pair(&mut self, cpu: usize, addr: u64) -> Option<[u64; 2]> {
        let text = self.hmp(&format!("x /2gx {addr:#x}"), Some(cpu)).ok()?;
        parse_memory_pair(&text)
    }
}

/// The words of a `x /2gx` answer (`ffff...: 0x... 0x...`); `None` for an error text.
pub fn parse_memory_pair(text: &str) -> Option<[u64; 2]> {
    let (_, words) = text.lines().next()?.split_once(": ")?;
    let mut words = words.split_whitespace().map(|w| u64::from_str_radix(w.trim_start_matches("0x"), 16));
    match (words.next(), words.next()) {
        (Some(Ok(a)), Some(Ok(b))) => Some([a, b]),
        _ => None,
    }
}

/// One vCPU's registers that matter for a hang.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vcpu {
    /// QEMU's CPU index.
    pub index: usize,
    /// Program counter.
    pub pc: u64,
    /// Stack pointer.
    pub sp: u64,
    /// Frame pointer (x29, s0, rbp).
    pub fp: u64,
    /// Link register (x30, ra); none on x86_64.
    pub link: Option<u64>,
    /// Privilege as QEMU prints it (`EL1h`, `CPL=0`), empty where it does not (riscv64 in 7.2).
    pub mode: String,
}

/// The vCPUs of an `info registers -a` answer (sections start `CPU#<n>`).
pub fn parse_registers(arch: Arch, text: &str) -> Vec<Vcpu> {
    let mut vcpus = Vec::new();
    let mut sections = text.split("CPU#").skip(1);
    for section in sections.by_ref() {
        let (index, body) = section.split_once('\n').unwrap_or((section, ""));
        let Ok(index) = index.trim().parse::<usize>() else { continue };
        let tokens: Vec<&str> = body.split_whitespace().collect();
        // `NAME=HEX` tokens (aarch64, x86_64).
        let eq = |name: &str| {
            tokens.iter().find_map(|t| t.split_once('=').filter(|(n, _)| *n == name).and_then(|(_, v)| u64::from_str_radix(v, 16).ok()))
        };
        // `NAME HEX` pairs (riscv64: `pc 8020...`, `x2/sp 8030...`).
        let pair = |name: &str| {
            tokens.windows(2).find(|w| w[0] == name).and_then(|w| u64::from_str_radix(w[1], 16).ok())
        };
        let vcpu = match arch {
            Arch::Aarch64 => {
                let mode = tokens.iter().find(|t| t.starts_with("EL") && t.len() == 4).map(|t| t.to_string()).unwrap_or_default();
                eq("PC").zip(eq("SP")).map(|(pc, sp)| Vcpu { index, pc, sp, fp: eq("X29").unwrap_or(0), link: eq("X30"), mode })
            }
            Arch::X86_64 => {
                let cpl = eq("CPL").map(|c| format!("CPL={c}")).unwrap_or_default();
                let mode = if eq("HLT") == Some(1) { format!("{cpl} halted") } else { cpl };
                eq("RIP").zip(eq("RSP")).map(|(pc, sp)| Vcpu { index, pc, sp, fp: eq("RBP").unwrap_or(0), link: None, mode })
            }
            Arch::Riscv64 => pair("pc").zip(pair("x2/sp")).map(|(pc, sp)| Vcpu {
                index,
                pc,
                sp,
                fp: pair("x8/s0").unwrap_or(0),
                link: pair("x1/ra"),
                mode: String::new(),
            }),
        };
        vcpus.extend(vcpu);
    }
    vcpus
}

/// The return addresses of `vcpu`'s frame records, innermost first, read with `read` (the two
/// words at an address). Stops at a zero or misaligned frame pointer, a zero return address, a
/// failed read, a record not above the one before (so a corrupt chain cannot loop), or
/// [`MAX_FRAMES`].
pub fn frame_chain(arch: Arch, vcpu: &Vcpu, mut read: impl FnMut(u64) -> Option<[u64; 2]>) -> Vec<u64> {
    let mut chain = Vec::new();
    let mut fp = vcpu.fp;
    let mut below = 0u64;
    while chain.len() < MAX_FRAMES && fp != 0 && fp % 8 == 0 && fp > below {
        // aarch64 and x86_64: the record (caller's frame pointer, return address) is where the
        // frame pointer points; riscv64: just below it.
        let record = match arch {
            Arch::Aarch64 | Arch::X86_64 => fp,
            Arch::Riscv64 => fp.wrapping_sub(16),
        };
        let Some([caller_fp, ret]) = read(record) else { break };
        if ret == 0 {
            break;
        }
        chain.push(ret);
        below = fp;
        fp = caller_fp;
    }
    chain
}

/// The return address of an x86_64 vCPU stopped in the first instruction of a function, or
/// right after its `push rbp`: its frame record is not made yet, so the frame pointer still
/// names the caller's record and [`frame_chain`] would skip the caller (a vCPU spinning in a
/// loop that calls a small function stops at that function's entry about as often as
/// anywhere). At offset 0 it is the word at the stack pointer, after the push the word above
/// it. `offset` is the pc's offset into its function; `read` gives the two words at an
/// address. aarch64 and riscv64 need none of this: the link register holds the return address
/// until the record is made, and the report names it.
pub fn x86_entry_return(vcpu: &Vcpu, offset: Option<u64>, mut read: impl FnMut(u64) -> Option<[u64; 2]>) -> Option<u64> {
    /// `push rbp`, the first instruction of every function built with frame pointers.
    const PUSH_RBP: u64 = 0x55;
    let [at_sp, above] = match offset? {
        0 => read(vcpu.sp)?,
        1 if read(vcpu.pc - 1)?[0] & 0xff == PUSH_RBP => read(vcpu.sp)?,
        _ => return None,
    };
    let ret = if offset == Some(0) { at_sp } else { above };
    (ret != 0).then_some(ret)
}

/// The offset of code address `addr` into the function holding it, if an image names it.
fn function_offset(images: &[Image], addr: u64) -> Option<u64> {
    images.iter().find_map(|image| {
        let link = addr.wrapping_sub(image.bias);
        image.symbols.contains(link).then(|| image.symbols.lookup(link).map(|(_, offset)| offset)).flatten()
    })
}

/// The report lines of one vCPU.
fn describe(vcpu: &Vcpu, chain: &[u64], images: &[Image]) -> Vec<String> {
    let mode = if vcpu.mode.is_empty() { String::new() } else { format!(" {}", vcpu.mode) };
    let mut lines = vec![format!("cpu {}{mode} pc {:#018x} {}", vcpu.index, vcpu.pc, symbolize(images, vcpu.pc))];
    let link = match vcpu.link {
        Some(link) => format!(" lr {link:#018x} {}", symbolize_return(images, link)),
        None => String::new(),
    };
    lines.push(format!("cpu {}   sp {:#018x} fp {:#018x}{link}", vcpu.index, vcpu.sp, vcpu.fp));
    for (depth, ret) in chain.iter().enumerate() {
        lines.push(format!("cpu {}   #{} {ret:#018x} {}", vcpu.index, depth + 1, symbolize_return(images, *ret)));
    }
    lines
}

/// `[image] symbol+offset` for the code address `addr`, `?` where no image holds it.
fn symbolize(images: &[Image], addr: u64) -> String {
    name_code(images, addr, false)
}

/// [`symbolize`] for a return address: named by the call before it (`addr - 1`), so a call
/// that never returns, last in its function, is not put in the function after it.
fn symbolize_return(images: &[Image], addr: u64) -> String {
    name_code(images, addr, true)
}

fn name_code(images: &[Image], addr: u64, is_return: bool) -> String {
    let back = u64::from(is_return && addr > 0);
    for image in images {
        let link = addr.wrapping_sub(image.bias).wrapping_sub(back);
        if image.symbols.contains(link) {
            return match image.symbols.lookup(link).map(|(name, offset)| (name, offset + back)) {
                Some((name, 0)) => format!("[{}] {name}", image.label),
                Some((name, offset)) => format!("[{}] {name}+{offset:#x}", image.label),
                None => format!("[{}] ?", image.label),
            };
        }
    }
    "?".to_string()
}

/// An ELF and where it was loaded.
struct Image {
    /// `kernel`, or the program's name and domain.
    label: String,
    /// Run-time address minus link-time address.
    bias: u64,
    symbols: Rc<Symbols>,
}

/// The kernel and every program the log says was started, and what could not be loaded.
fn images(kernel: &Path, programs: &[(String, PathBuf)], log: &str) -> (Vec<Image>, Vec<String>) {
    let mut images = Vec::new();
    let mut problems = Vec::new();
    match Symbols::load(kernel) {
        Ok(symbols) => images.push(Image { label: "kernel".to_string(), bias: 0, symbols: Rc::new(symbols) }),
        Err(error) => problems.push(format!("no kernel symbols: {error:#}")),
    }
    let mut loaded: HashMap<String, Rc<Symbols>> = HashMap::new();
    for (domain, name, entry) in started_programs(log) {
        let Some((_, path)) = programs.iter().find(|(n, _)| *n == name) else { continue };
        let symbols = match loaded.get(&name) {
            Some(symbols) => Rc::clone(symbols),
            None => match Symbols::load(path) {
                Ok(symbols) => Rc::clone(loaded.entry(name.clone()).or_insert(Rc::new(symbols))),
                Err(error) => {
                    problems.push(format!("no symbols for {name}: {error:#}"));
                    continue;
                }
            },
        };
        let bias = entry.wrapping_sub(symbols.entry);
        images.push(Image { label: format!("{name} (domain {domain})"), bias, symbols });
    }
    (images, problems)
}

/// `(domain, program, entry)` of every `domain N NAME: started at 0xADDR` line.
pub fn started_programs(log: &str) -> Vec<(u64, String, u64)> {
    log.lines()
        .filter_map(|line| {
            let (head, entry) = line.trim().split_once(STARTED_AT)?;
            let entry = u64::from_str_radix(entry.trim(), 16).ok()?;
            let mut words = head.strip_prefix(tsumugi_abi::log::DOMAIN)?.split_whitespace();
            let domain = words.next()?.parse().ok()?;
            let name = words.next()?.to_string();
            Some((domain, name, entry))
        })
        .collect()
}

/// The code symbols of an ELF64 little-endian file, by link-time address.
#[derive(Debug)]
pub struct Symbols {
    /// Entry point.
    pub entry: u64,
    /// Link-time span of the loadable segments.
    span: (u64, u64),
    /// `(address, size, demangled name)`, sorted by address.
    functions: Vec<(u64, u64, String)>,
}

/// ELF constants this reader uses.
mod elf {
    pub const PT_LOAD: u32 = 1;
    pub const SHT_SYMTAB: u32 = 2;
    pub const STT_NOTYPE: u8 = 0;
    pub const STT_FUNC: u8 = 2;
    pub const SHN_UNDEF: u16 = 0;
    pub const SHN_LORESERVE: u16 = 0xff00;
    pub const SYM_SIZE: usize = 24;
}

impl Symbols {
    /// Reads `path`.
    pub fn load(path: &Path) -> Result<Symbols> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        Symbols::parse(&bytes).with_context(|| format!("reading the symbols of {}", path.display()))
    }

    /// Reads an ELF64 little-endian image: its entry, loadable span and function symbols
    /// (`FUNC`, and `NOTYPE` labels of assembly code; not mapping symbols such as `$x`).
    pub fn parse(bytes: &[u8]) -> Result<Symbols> {
        let u16_at = |at: usize| bytes.get(at..at + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
        let u32_at = |at: usize| bytes.get(at..at + 4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")));
        let u64_at = |at: usize| bytes.get(at..at + 8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
        let usize_at = |at: usize| u64_at(at).and_then(|v| usize::try_from(v).ok());
        if bytes.get(..6) != Some(&[0x7f, b'E', b'L', b'F', 2, 1][..]) {
            bail!("not a little-endian ELF64 file");
        }
        let truncated = || anyhow::anyhow!("truncated ELF header");
        let entry = u64_at(0x18).ok_or_else(truncated)?;
        let phoff = usize_at(0x20).ok_or_else(truncated)?;
        let shoff = usize_at(0x28).ok_or_else(truncated)?;
        let phentsize = usize::from(u16_at(0x36).ok_or_else(truncated)?);
        let phnum = usize::from(u16_at(0x38).ok_or_else(truncated)?);
        let shentsize = usize::from(u16_at(0x3a).ok_or_else(truncated)?);
        let shnum = usize::from(u16_at(0x3c).ok_or_else(truncated)?);
        let mut span = (u64::MAX, 0u64);
        for i in 0..phnum {
            let at = phoff + i * phentsize;
            if u32_at(at) == Some(elf::PT_LOAD) {
                let (Some(vaddr), Some(memsz)) = (u64_at(at + 0x10), u64_at(at + 0x28)) else { bail!("truncated program header") };
                span = (span.0.min(vaddr), span.1.max(vaddr.saturating_add(memsz)));
            }
        }
        let mut functions = Vec::new();
        for i in 0..shnum {
            let at = shoff + i * shentsize;
            if u32_at(at + 4) != Some(elf::SHT_SYMTAB) {
                continue;
            }
            let (Some(offset), Some(size), Some(link)) = (usize_at(at + 0x18), usize_at(at + 0x20), u32_at(at + 0x28)) else {
                bail!("truncated section header")
            };
            let strtab_at = shoff + usize::try_from(link)? * shentsize;
            let (Some(str_offset), Some(str_size)) = (usize_at(strtab_at + 0x18), usize_at(strtab_at + 0x20)) else {
                bail!("truncated string table header")
            };
            let strings = bytes.get(str_offset..str_offset.saturating_add(str_size)).context("string table outside the file")?;
            let table = bytes.get(offset..offset.saturating_add(size)).context("symbol table outside the file")?;
            for sym in table.chunks_exact(elf::SYM_SIZE) {
                let name_at = u32::from_le_bytes(sym[0..4].try_into().expect("4 bytes")) as usize;
                let kind = sym[4] & 0xf;
                let section = u16::from_le_bytes([sym[6], sym[7]]);
                let value = u64::from_le_bytes(sym[8..16].try_into().expect("8 bytes"));
                let size = u64::from_le_bytes(sym[16..24].try_into().expect("8 bytes"));
                if !(kind == elf::STT_FUNC || kind == elf::STT_NOTYPE) || section == elf::SHN_UNDEF || section >= elf::SHN_LORESERVE {
                    continue;
                }
                let Some(name) = strings.get(name_at..).and_then(|s| s.split(|&b| b == 0).next()) else { continue };
                let name = String::from_utf8_lossy(name);
                if name.is_empty() || name.starts_with('$') || name.starts_with(".L") {
                    continue;
                }
                functions.push((value, if kind == elf::STT_FUNC { size } else { 0 }, format!("{:#}", rustc_demangle::demangle(&name))));
            }
        }
        // At one address, sized (function) symbols first.
        functions.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        Ok(Symbols { entry, span, functions })
    }

    /// Whether a loadable segment spans link-time address `addr`.
    pub fn contains(&self, addr: u64) -> bool {
        (self.span.0..self.span.1).contains(&addr)
    }

    /// The symbol holding link-time address `addr` and the offset into it: the nearest symbol
    /// at or below it whose size covers it, or an unsized label (assembly) right below it.
    pub fn lookup(&self, addr: u64) -> Option<(&str, u64)> {
        let above = self.functions.partition_point(|(start, _, _)| *start <= addr);
        let below = &self.functions[..above];
        // Sized symbols may nest or overlap (a few entries back), so look a little further.
        let covering = below.iter().rev().take(16).find(|(start, size, _)| *size > 0 && addr - start < *size);
        let nearest = below.last().filter(|(_, size, _)| *size == 0);
        match (covering, nearest) {
            // An unsized label inside a sized symbol is the finer name (a vector in a table).
            (Some(c), Some(n)) if n.0 > c.0 => Some((n.2.as_str(), addr - n.0)),
            (Some(c), _) => Some((c.2.as_str(), addr - c.0)),
            (None, Some(n)) => Some((n.2.as_str(), addr - n.0)),
            (None, None) => None,
        }
    }

    /// The link-time address of the first symbol whose name contains `text`.
    #[cfg(test)]
    pub fn address_of(&self, text: &str) -> Option<u64> {
        self.functions.iter().find(|(_, _, name)| name.contains(text)).map(|(addr, _, _)| *addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `info registers -a` of QEMU 7.2, trimmed to the lines the parser reads.
    const AARCH64: &str = "\nCPU#0\n PC=ffffffffc0212340 X00=0000000000000000 X01=0000000000000001\n\
        X29=ffffffffc1000f80 X30=ffffffffc0212300  SP=ffffffffc1000f70\n\
        PSTATE=600003c5 -ZC- EL1h  SVCR=00000000 --  BTYPE=0    FPU disabled\n\
        \nCPU#1\n PC=0000000040213000 X00=0000000000000000\n\
        X29=000000004fff0ff0 X30=0000000040212000  SP=000000004fff0fe0\n\
        PSTATE=20000000 --C- EL0t  SVCR=00000000 --  BTYPE=0\n";
    const RISCV64: &str = "\nCPU#0\n V      =   0\n pc       ffffffff80201234\n mhartid  0000000000000000\n\
        x0/zero  0000000000000000 x1/ra    ffffffff80201200 x2/sp    ffffffff80400ff0 x3/gp    0000000000000000\n\
        x8/s0    ffffffff80401000 x9/s1    0000000000000000\n";
    const X86_64: &str = "\nCPU#0\nRAX=0000000000000000 RBX=0000000000000000\n\
        RSI=0000000000000000 RDI=0000000000000000 RBP=ffffffff80100ff0 RSP=ffffffff80100fe0\n\
        RIP=ffffffff80212340 RFL=00000046 [---Z-P-] CPL=0 II=0 A20=1 SMM=0 HLT=1\n\
        ES =0000 0000000000000000 00000000 00000000\n";

    #[test]
    fn parses_every_vcpu_of_each_architecture() {
        assert_eq!(
            parse_registers(Arch::Aarch64, AARCH64),
            [
                Vcpu { index: 0, pc: 0xffff_ffff_c021_2340, sp: 0xffff_ffff_c100_0f70, fp: 0xffff_ffff_c100_0f80, link: Some(0xffff_ffff_c021_2300), mode: "EL1h".into() },
                Vcpu { index: 1, pc: 0x4021_3000, sp: 0x4fff_0fe0, fp: 0x4fff_0ff0, link: Some(0x4021_2000), mode: "EL0t".into() },
            ]
        );
        assert_eq!(
            parse_registers(Arch::Riscv64, RISCV64),
            [Vcpu { index: 0, pc: 0xffff_ffff_8020_1234, sp: 0xffff_ffff_8040_0ff0, fp: 0xffff_ffff_8040_1000, link: Some(0xffff_ffff_8020_1200), mode: String::new() }]
        );
        assert_eq!(
            parse_registers(Arch::X86_64, X86_64),
            [Vcpu { index: 0, pc: 0xffff_ffff_8021_2340, sp: 0xffff_ffff_8010_0fe0, fp: 0xffff_ffff_8010_0ff0, link: None, mode: "CPL=0 halted".into() }]
        );
        assert!(parse_registers(Arch::Aarch64, "Error: no CPU").is_empty());
    }

    #[test]
    fn reads_memory_answers() {
        assert_eq!(parse_memory_pair("ffffffffc1000f80: 0xffffffffc1000fa0 0xffffffffc0210010\r\n"), Some([0xffff_ffff_c100_0fa0, 0xffff_ffff_c021_0010]));
        assert_eq!(parse_memory_pair("Cannot access memory\r\n"), None);
        assert_eq!(parse_memory_pair(""), None);
    }

    #[test]
    fn walks_frame_records_and_stops_on_a_bad_chain() {
        let vcpu = Vcpu { index: 0, pc: 0x1000, sp: 0x7f00, fp: 0x8000, link: Some(0x1100), mode: String::new() };
        let memory: HashMap<u64, [u64; 2]> = [(0x8000, [0x8040, 0x2000]), (0x8040, [0x8080, 0x3000]), (0x8080, [0, 0x4000])].into();
        assert_eq!(frame_chain(Arch::Aarch64, &vcpu, |a| memory.get(&a).copied()), [0x2000, 0x3000, 0x4000]);
        // riscv64 keeps the record below the frame pointer.
        let shifted: HashMap<u64, [u64; 2]> = memory.iter().map(|(a, r)| (a - 16, *r)).collect();
        assert_eq!(frame_chain(Arch::Riscv64, &vcpu, |a| shifted.get(&a).copied()), [0x2000, 0x3000, 0x4000]);
        // A record pointing back down (or at itself) ends the walk instead of looping.
        let looping: HashMap<u64, [u64; 2]> = [(0x8000, [0x8040, 0x2000]), (0x8040, [0x8000, 0x3000])].into();
        assert_eq!(frame_chain(Arch::X86_64, &vcpu, |a| looping.get(&a).copied()), [0x2000, 0x3000]);
        // An unreadable record, a misaligned or zero frame pointer: nothing more.
        assert!(frame_chain(Arch::Aarch64, &vcpu, |_| None).is_empty());
        assert!(frame_chain(Arch::Aarch64, &Vcpu { fp: 0x8003, ..vcpu.clone() }, |a| memory.get(&a).copied()).is_empty());
        let endless = |a: u64| Some([a + 16, 0x5000]);
        assert_eq!(frame_chain(Arch::Aarch64, &vcpu, endless).len(), MAX_FRAMES);
    }

    /// An x86_64 vCPU stopped before its function's frame record exists: the caller's return
    /// address comes from the stack (at the entry, or after `push rbp`), else from nowhere.
    #[test]
    fn x86_entry_return_reads_the_stack_before_the_frame_exists() {
        let vcpu = Vcpu { index: 0, pc: 0x1001, sp: 0x7f00, fp: 0x8000, link: None, mode: String::new() };
        let memory: HashMap<u64, [u64; 2]> = [(0x7f00, [0x2000, 0x3000]), (0x1000, [0x48e5_8948_55, 0])].into();
        let read = |a: u64| memory.get(&a).copied();
        assert_eq!(x86_entry_return(&Vcpu { pc: 0x1000, ..vcpu.clone() }, Some(0), read), Some(0x2000));
        assert_eq!(x86_entry_return(&vcpu, Some(1), read), Some(0x3000));
        // One byte in, but not after a `push rbp`; deeper in; no function known: nothing.
        let other: HashMap<u64, [u64; 2]> = [(0x7f00, [0x2000, 0x3000]), (0x1000, [0x90, 0])].into();
        assert_eq!(x86_entry_return(&vcpu, Some(1), |a| other.get(&a).copied()), None);
        assert_eq!(x86_entry_return(&vcpu, Some(4), read), None);
        assert_eq!(x86_entry_return(&vcpu, None, read), None);
        // An unreadable stack: nothing.
        assert_eq!(x86_entry_return(&Vcpu { pc: 0x1000, ..vcpu.clone() }, Some(0), |_| None), None);
    }

    #[test]
    fn finds_programs_in_the_log() {
        let log = "cpus online: 4\ndomain 1 fuzz_victim: started at 0x40013e5c\ndomain 2 fuzz: started at 0x4021869c\n\
                   fuzz: seed 0x73756d7567690015\n";
        assert_eq!(
            started_programs(log),
            [(1, "fuzz_victim".to_string(), 0x4001_3e5c), (2, "fuzz".to_string(), 0x4021_869c)]
        );
    }

    /// A function whose address the test looks up in this test binary's own symbols.
    #[inline(never)]
    fn probe_marker_function(x: u64) -> u64 {
        std::hint::black_box(x.wrapping_mul(3))
    }

    fn symbols_size(symbols: &Symbols, start: u64) -> u64 {
        symbols.functions.iter().find(|(a, size, _)| *a == start && *size > 0).map(|(_, size, _)| *size).unwrap()
    }

    #[test]
    fn names_addresses_with_an_elfs_symbols() {
        assert_eq!(probe_marker_function(2), 6);
        let exe = std::env::current_exe().unwrap();
        let symbols = Symbols::load(&exe).unwrap();
        let start = symbols.address_of("probe_marker_function").expect("the test binary has its symbol table");
        assert!(symbols.contains(start));
        let (name, offset) = symbols.lookup(start + 4).unwrap();
        assert!(name.ends_with("hang::tests::probe_marker_function"), "{name}");
        assert_eq!(offset, 4);
        // Relocated: a run-time address is named through the image's bias, and one outside
        // every image is not named.
        let images = vec![Image { label: "me".to_string(), bias: 0x1000_0000, symbols: Rc::new(symbols) }];
        assert!(symbolize(&images, start + 0x1000_0004).starts_with("[me] "), "{}", symbolize(&images, start + 0x1000_0004));
        assert!(symbolize(&images, start + 0x1000_0004).ends_with("probe_marker_function+0x4"));
        assert_eq!(symbolize(&images, 8), "?");
        // A return address just past the function (its last call never returns) is named by
        // the call, in the function.
        let end = start + 0x1000_0000 + symbols_size(&images[0].symbols, start);
        assert!(symbolize_return(&images, end).contains("probe_marker_function+0x"), "{}", symbolize_return(&images, end));
        assert!(Symbols::parse(b"not an elf").is_err());
    }
}
