//! The seccomp filter every sandboxed command runs under, modelled on the default profile of
//! Docker and containerd, as a deny list over what the sandbox's namespaces already shut:
//!
//! - new namespaces: `unshare` and `clone` with any `CLONE_NEW*` flag, and `setns`, fail with
//!   `EPERM` (a nested user namespace would give its creator `CAP_SYS_ADMIN` over it, and with
//!   it the kernel's namespaced attack surface); `clone3`, whose flags lie in memory a filter
//!   cannot read, fails with `ENOSYS`, so the C library falls back to `clone`, which the filter
//!   checks (`bwrap --disable-userns` shuts user namespaces a second way);
//! - the kernel's large, often-exploited interfaces no command needs: `io_uring_*`, the key
//!   ring (`keyctl`, `add_key`, `request_key`), `bpf`, `perf_event_open`, `userfaultfd`,
//!   `fanotify_init`, fail with `EPERM`;
//! - tracing: `ptrace`, `process_vm_readv` and `process_vm_writev` fail with `EPERM`. Since Linux
//!   4.8 a tracer cannot take a process past its filter, but `ptrace` has had privilege bugs of
//!   its own (`PTRACE_TRACEME`, CVE-2019-13272), and commands have no debugger to run;
//! - what needs a privilege the sandbox never has, refused before the kernel looks further:
//!   modules and `kexec`, the mount API old and new (`mount`, `umount2`, `pivot_root`, `fsopen`,
//!   `fsconfig`, `fsmount`, `fspick`, `move_mount`, `open_tree`, `open_tree_attr`,
//!   `mount_setattr`), `swapon`/`swapoff`, `reboot`, file handles (`open_by_handle_at`,
//!   `name_to_handle_at`), `lookup_dcookie`, `acct`, `quotactl`, `quotactl_fd`, and on x86_64
//!   `iopl`/`ioperm`; all `EPERM`;
//! - `personality` only with the values Docker allows (0, `PER_LINUX32`, `UNAME26`, both, and
//!   the query `0xffffffff`), so no command turns off address space randomization or makes
//!   reads imply execution; others `EPERM`;
//! - `fallocate` fails with `EOPNOTSUPP`: with `FALLOC_FL_KEEP_SIZE` it allocates blocks that
//!   `RLIMIT_FSIZE` never checks (one call could fill the host's disk); refused, programs fall
//!   back to writing, which the file size limit and the disk quota bound.
//!
//! Everything else is allowed. The filter is a classic BPF program, handed to `bwrap --seccomp FD`
//! compiled: an array of `struct sock_filter` in native byte order. It first checks the
//! architecture a call is made in: a call of another ABI (a 32-bit program on x86_64 entering
//! through `int 0x80`, where the numbers differ) kills the process, since letting it through
//! would let it past the filter, and no program the sandboxes run is one. On x86_64, x32 calls
//! (numbers with bit 30 set) fail with `ENOSYS`, as on a kernel built without x32. Only x86_64 and
//! aarch64 have a filter; elsewhere commands run without one.

/// `struct sock_filter`: one classic BPF instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Instruction {
    code: u16,
    /// How many instructions to skip when a jump's condition holds, and when it does not.
    jt: u8,
    jf: u8,
    k: u32,
}

/// `BPF_LD | BPF_W | BPF_ABS`: load the 32-bit word at offset `k` of `struct seccomp_data`.
const LOAD_WORD: u16 = 0x20;
/// `BPF_JMP | BPF_JEQ | BPF_K`, `BPF_JMP | BPF_JGE | BPF_K` and `BPF_JMP | BPF_JSET | BPF_K`.
const JUMP_IF_EQUAL: u16 = 0x15;
const JUMP_IF_AT_LEAST: u16 = 0x35;
const JUMP_IF_ANY_BIT: u16 = 0x45;
/// `BPF_RET | BPF_K`: the verdict `k`.
const RETURN: u16 = 0x06;

/// Offsets in `struct seccomp_data` of the call's number, its architecture, and the low 32
/// bits of its first argument (a 64-bit word at 16, in native byte order).
const NR_OFFSET: u32 = 0;
const ARCH_OFFSET: u32 = 4;
const ARG0_LOW_OFFSET: u32 = if cfg!(target_endian = "big") { 20 } else { 16 };

const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const EPERM: u32 = 1;
const ENOSYS: u32 = 38;
const EOPNOTSUPP: u32 = 95;

/// The `CLONE_NEW*` flags of `clone(2)`: mount, cgroup, UTS, IPC, user, PID and network
/// namespaces. (`CLONE_NEWTIME`, 0x80, lies among `clone`'s exit signal bits; only `unshare`
/// takes it.)
const CLONE_NAMESPACES: u32 = 0x7E02_0000;
const UNSHARE_NAMESPACES: u32 = CLONE_NAMESPACES | 0x80;

/// The `personality(2)` values Docker's default profile allows: `PER_LINUX`, `PER_LINUX32`,
/// `UNAME26`, `PER_LINUX32 | UNAME26`, and the query.
const SAFE_PERSONALITIES: [u32; 5] = [0, 0x8, 0x2_0000, 0x2_0008, 0xffff_ffff];

/// What the filter does with one system call.
#[derive(Clone, Copy, Debug)]
struct Rule {
    /// The call's name, as in `syscalls(2)` (the tests find rules by it).
    #[cfg_attr(not(test), expect(dead_code))]
    name: &'static str,
    /// Its number in the architecture's table.
    nr: u32,
    action: Action,
}

#[derive(Clone, Copy, Debug)]
enum Action {
    /// Fails with the errno.
    Deny(u32),
    /// Fails with the errno when the first argument has any of the bits.
    DenyFlags(u32, u32),
    /// Fails with the errno unless the first argument is one of the values.
    AllowValues(&'static [u32], u32),
}

const fn rule(name: &'static str, nr: u32, action: Action) -> Rule {
    Rule { name, nr, action }
}

/// What the filter needs to know of an architecture.
#[derive(Debug)]
pub(crate) struct Arch {
    /// As in the filter's file name.
    pub(crate) name: &'static str,
    /// `AUDIT_ARCH_*`, as `seccomp_data.arch` holds it.
    audit: u32,
    /// The bit marking the calls of a second ABI sharing the architecture (x32 on x86_64).
    other_abi_bit: Option<u32>,
    /// The rules, by the architecture's call numbers.
    rules: &'static [Rule],
}

/// The rules on x86_64 (`asm/unistd_64.h`).
const X86_64_RULES: &[Rule] = &[
    rule("clone", 56, Action::DenyFlags(CLONE_NAMESPACES, EPERM)),
    rule("clone3", 435, Action::Deny(ENOSYS)),
    rule("unshare", 272, Action::DenyFlags(UNSHARE_NAMESPACES, EPERM)),
    rule("setns", 308, Action::Deny(EPERM)),
    rule("io_uring_setup", 425, Action::Deny(EPERM)),
    rule("io_uring_enter", 426, Action::Deny(EPERM)),
    rule("io_uring_register", 427, Action::Deny(EPERM)),
    rule("keyctl", 250, Action::Deny(EPERM)),
    rule("add_key", 248, Action::Deny(EPERM)),
    rule("request_key", 249, Action::Deny(EPERM)),
    rule("bpf", 321, Action::Deny(EPERM)),
    rule("perf_event_open", 298, Action::Deny(EPERM)),
    rule("userfaultfd", 323, Action::Deny(EPERM)),
    rule("fanotify_init", 300, Action::Deny(EPERM)),
    rule("ptrace", 101, Action::Deny(EPERM)),
    rule("process_vm_readv", 310, Action::Deny(EPERM)),
    rule("process_vm_writev", 311, Action::Deny(EPERM)),
    rule("kexec_load", 246, Action::Deny(EPERM)),
    rule("kexec_file_load", 320, Action::Deny(EPERM)),
    rule("init_module", 175, Action::Deny(EPERM)),
    rule("finit_module", 313, Action::Deny(EPERM)),
    rule("delete_module", 176, Action::Deny(EPERM)),
    rule("mount", 165, Action::Deny(EPERM)),
    rule("umount2", 166, Action::Deny(EPERM)),
    rule("pivot_root", 155, Action::Deny(EPERM)),
    rule("fsopen", 430, Action::Deny(EPERM)),
    rule("fsconfig", 431, Action::Deny(EPERM)),
    rule("fsmount", 432, Action::Deny(EPERM)),
    rule("fspick", 433, Action::Deny(EPERM)),
    rule("move_mount", 429, Action::Deny(EPERM)),
    rule("open_tree", 428, Action::Deny(EPERM)),
    rule("open_tree_attr", 467, Action::Deny(EPERM)),
    rule("mount_setattr", 442, Action::Deny(EPERM)),
    rule("swapon", 167, Action::Deny(EPERM)),
    rule("swapoff", 168, Action::Deny(EPERM)),
    rule("reboot", 169, Action::Deny(EPERM)),
    rule("open_by_handle_at", 304, Action::Deny(EPERM)),
    rule("name_to_handle_at", 303, Action::Deny(EPERM)),
    rule("lookup_dcookie", 212, Action::Deny(EPERM)),
    rule("acct", 163, Action::Deny(EPERM)),
    rule("quotactl", 179, Action::Deny(EPERM)),
    rule("quotactl_fd", 443, Action::Deny(EPERM)),
    rule("iopl", 172, Action::Deny(EPERM)),
    rule("ioperm", 173, Action::Deny(EPERM)),
    rule("personality", 135, Action::AllowValues(&SAFE_PERSONALITIES, EPERM)),
    rule("fallocate", 285, Action::Deny(EOPNOTSUPP)),
];

/// The rules on aarch64 (the generic table, `asm-generic/unistd.h`), which has no `iopl` or
/// `ioperm`.
const AARCH64_RULES: &[Rule] = &[
    rule("clone", 220, Action::DenyFlags(CLONE_NAMESPACES, EPERM)),
    rule("clone3", 435, Action::Deny(ENOSYS)),
    rule("unshare", 97, Action::DenyFlags(UNSHARE_NAMESPACES, EPERM)),
    rule("setns", 268, Action::Deny(EPERM)),
    rule("io_uring_setup", 425, Action::Deny(EPERM)),
    rule("io_uring_enter", 426, Action::Deny(EPERM)),
    rule("io_uring_register", 427, Action::Deny(EPERM)),
    rule("keyctl", 219, Action::Deny(EPERM)),
    rule("add_key", 217, Action::Deny(EPERM)),
    rule("request_key", 218, Action::Deny(EPERM)),
    rule("bpf", 280, Action::Deny(EPERM)),
    rule("perf_event_open", 241, Action::Deny(EPERM)),
    rule("userfaultfd", 282, Action::Deny(EPERM)),
    rule("fanotify_init", 262, Action::Deny(EPERM)),
    rule("ptrace", 117, Action::Deny(EPERM)),
    rule("process_vm_readv", 270, Action::Deny(EPERM)),
    rule("process_vm_writev", 271, Action::Deny(EPERM)),
    rule("kexec_load", 104, Action::Deny(EPERM)),
    rule("kexec_file_load", 294, Action::Deny(EPERM)),
    rule("init_module", 105, Action::Deny(EPERM)),
    rule("finit_module", 273, Action::Deny(EPERM)),
    rule("delete_module", 106, Action::Deny(EPERM)),
    rule("mount", 40, Action::Deny(EPERM)),
    rule("umount2", 39, Action::Deny(EPERM)),
    rule("pivot_root", 41, Action::Deny(EPERM)),
    rule("fsopen", 430, Action::Deny(EPERM)),
    rule("fsconfig", 431, Action::Deny(EPERM)),
    rule("fsmount", 432, Action::Deny(EPERM)),
    rule("fspick", 433, Action::Deny(EPERM)),
    rule("move_mount", 429, Action::Deny(EPERM)),
    rule("open_tree", 428, Action::Deny(EPERM)),
    rule("open_tree_attr", 467, Action::Deny(EPERM)),
    rule("mount_setattr", 442, Action::Deny(EPERM)),
    rule("swapon", 224, Action::Deny(EPERM)),
    rule("swapoff", 225, Action::Deny(EPERM)),
    rule("reboot", 142, Action::Deny(EPERM)),
    rule("open_by_handle_at", 265, Action::Deny(EPERM)),
    rule("name_to_handle_at", 264, Action::Deny(EPERM)),
    rule("lookup_dcookie", 18, Action::Deny(EPERM)),
    rule("acct", 89, Action::Deny(EPERM)),
    rule("quotactl", 60, Action::Deny(EPERM)),
    rule("quotactl_fd", 443, Action::Deny(EPERM)),
    rule("personality", 92, Action::AllowValues(&SAFE_PERSONALITIES, EPERM)),
    rule("fallocate", 47, Action::Deny(EOPNOTSUPP)),
];

const X86_64: Arch = Arch { name: "x86_64", audit: 0xC000_003E, other_abi_bit: Some(0x4000_0000), rules: X86_64_RULES };
const AARCH64: Arch = Arch { name: "aarch64", audit: 0xC000_00B7, other_abi_bit: None, rules: AARCH64_RULES };

/// The architecture this harness is built for, if it has a filter.
pub(crate) fn native() -> Option<&'static Arch> {
    if cfg!(target_arch = "x86_64") {
        Some(&X86_64)
    } else if cfg!(target_arch = "aarch64") {
        Some(&AARCH64)
    } else {
        None
    }
}

/// The filter of `arch`, compiled for `bwrap --seccomp`.
pub(crate) fn compiled(arch: &Arch) -> Vec<u8> {
    program(arch).into_iter().flat_map(Instruction::to_bytes).collect()
}

fn program(arch: &Arch) -> Vec<Instruction> {
    let load = |k| Instruction { code: LOAD_WORD, jt: 0, jf: 0, k };
    let ret = |k| Instruction { code: RETURN, jt: 0, jf: 0, k };
    let deny = |errno| ret(SECCOMP_RET_ERRNO | errno);
    // A test jumping past the next `skip` instructions (a rule's block) when it does not hold.
    let if_equal = |k, skip: usize| Instruction { code: JUMP_IF_EQUAL, jt: 0, jf: jump(skip), k };
    let unless_equal = |k| Instruction { code: JUMP_IF_EQUAL, jt: 1, jf: 0, k };
    let if_at_least = |k| Instruction { code: JUMP_IF_AT_LEAST, jt: 0, jf: 1, k };
    let mut program = vec![load(ARCH_OFFSET), unless_equal(arch.audit), ret(SECCOMP_RET_KILL_PROCESS), load(NR_OFFSET)];
    if let Some(bit) = arch.other_abi_bit {
        program.extend([if_at_least(bit), deny(ENOSYS)]);
    }
    // Invariant: the accumulator holds the call's number at every rule's test; a rule's block
    // loads an argument only after its test held, and ends in a verdict on every path.
    for rule in arch.rules {
        match rule.action {
            Action::Deny(errno) => program.extend([if_equal(rule.nr, 1), deny(errno)]),
            Action::DenyFlags(flags, errno) => program.extend([
                if_equal(rule.nr, 4),
                load(ARG0_LOW_OFFSET),
                Instruction { code: JUMP_IF_ANY_BIT, jt: 0, jf: 1, k: flags },
                deny(errno),
                ret(SECCOMP_RET_ALLOW),
            ]),
            Action::AllowValues(values, errno) => {
                program.extend([if_equal(rule.nr, values.len() + 3), load(ARG0_LOW_OFFSET)]);
                // Each allowed value jumps to the allowing verdict, past the values after it and the denial.
                for (at, value) in values.iter().enumerate() {
                    program.push(Instruction { code: JUMP_IF_EQUAL, jt: jump(values.len() - at), jf: 0, k: *value });
                }
                program.extend([deny(errno), ret(SECCOMP_RET_ALLOW)]);
            }
        }
    }
    program.push(ret(SECCOMP_RET_ALLOW));
    program
}

/// A jump's offset: the rules are short, far under the 255 instructions a jump can skip.
fn jump(skip: usize) -> u8 {
    u8::try_from(skip).expect("a rule's block is under 256 instructions")
}

impl Instruction {
    /// As the kernel reads it: `u16 code; u8 jt; u8 jf; u32 k`, in native byte order.
    fn to_bytes(self) -> [u8; 8] {
        let mut bytes = [0; 8];
        bytes[..2].copy_from_slice(&self.code.to_ne_bytes());
        bytes[2] = self.jt;
        bytes[3] = self.jf;
        bytes[4..].copy_from_slice(&self.k.to_ne_bytes());
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a program on a call as the kernel would: its verdict.
    fn verdict_with(program: &[Instruction], arch: u32, nr: u32, arg0: u32) -> u32 {
        let (mut at, mut accumulator) = (0, 0);
        loop {
            let instruction = program.get(at).expect("every path ends in a verdict");
            at += 1;
            match instruction.code {
                LOAD_WORD if instruction.k == NR_OFFSET => accumulator = nr,
                LOAD_WORD if instruction.k == ARCH_OFFSET => accumulator = arch,
                LOAD_WORD if instruction.k == ARG0_LOW_OFFSET => accumulator = arg0,
                JUMP_IF_EQUAL | JUMP_IF_AT_LEAST | JUMP_IF_ANY_BIT => {
                    let holds = match instruction.code {
                        JUMP_IF_EQUAL => accumulator == instruction.k,
                        JUMP_IF_AT_LEAST => accumulator >= instruction.k,
                        _ => accumulator & instruction.k != 0,
                    };
                    at += usize::from(if holds { instruction.jt } else { instruction.jf });
                }
                RETURN => return instruction.k,
                other => panic!("unexpected instruction {other:#x}"),
            }
        }
    }

    fn verdict(program: &[Instruction], arch: u32, nr: u32) -> u32 {
        verdict_with(program, arch, nr, 0)
    }

    /// The number of a call on an architecture.
    fn number(arch: &Arch, name: &str) -> u32 {
        arch.rules.iter().find(|rule| rule.name == name).unwrap_or_else(|| panic!("{name} on {}", arch.name)).nr
    }

    const DENIED: [&str; 41] = [
        "setns", "io_uring_setup", "io_uring_enter", "io_uring_register", "keyctl", "add_key", "request_key", "bpf",
        "perf_event_open", "userfaultfd", "fanotify_init", "ptrace", "process_vm_readv", "process_vm_writev",
        "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "mount", "umount2",
        "pivot_root", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "open_tree_attr",
        "mount_setattr", "swapon", "swapoff", "reboot", "open_by_handle_at", "name_to_handle_at", "lookup_dcookie",
        "acct", "quotactl", "quotactl_fd", "unshare", "personality",
    ];

    #[test]
    fn the_dangerous_calls_fail_and_the_rest_is_allowed() {
        for arch in [&X86_64, &AARCH64] {
            let program = program(arch);
            let errno = |errno: u32| SECCOMP_RET_ERRNO | errno;
            for name in DENIED {
                // `unshare` and `personality` are denied for these arguments.
                let arg0 = match name {
                    "unshare" => 0x1000_0000,
                    "personality" => 0x0040_0000,
                    _ => 0,
                };
                assert_eq!(verdict_with(&program, arch.audit, number(arch, name), arg0), errno(EPERM), "{arch:?} {name}");
            }
            assert_eq!(verdict(&program, arch.audit, number(arch, "fallocate")), 0x0005_005f, "{arch:?}");
            assert_eq!(verdict(&program, arch.audit, 435), errno(ENOSYS), "{arch:?} clone3");
            // clone: a thread or a process is allowed, a namespace is not.
            let clone = number(arch, "clone");
            for flags in [0x3d0f00, 0x1200011] {
                assert_eq!(verdict_with(&program, arch.audit, clone, flags), SECCOMP_RET_ALLOW, "{arch:?} {flags:#x}");
            }
            for namespace in [0x10000000, 0x20000, 0x20000000, 0x40000000, 0x8000000, 0x4000000, 0x2000000] {
                assert_eq!(verdict_with(&program, arch.audit, clone, namespace | 0x11), errno(EPERM), "{arch:?} {namespace:#x}");
            }
            // unshare: the file table or working directory alone is fine; a time namespace is not.
            let unshare = number(arch, "unshare");
            assert_eq!(verdict_with(&program, arch.audit, unshare, 0x400 | 0x200), SECCOMP_RET_ALLOW);
            assert_eq!(verdict_with(&program, arch.audit, unshare, 0x80), errno(EPERM));
            let personality = number(arch, "personality");
            for value in SAFE_PERSONALITIES {
                assert_eq!(verdict_with(&program, arch.audit, personality, value), SECCOMP_RET_ALLOW, "{value:#x}");
            }
            for value in [0x0040_0000, 0x0400_0000, 1] {
                assert_eq!(verdict_with(&program, arch.audit, personality, value), errno(EPERM), "{value:#x}");
            }
            // Ordinary calls: read, write, openat, execve, mmap, wait4, ...
            for nr in [0, 1, 3, 9, 56 + 1, 59, 61, 63, 64, 221, 222, 260, 284, 286, 434, 436, 441] {
                if !arch.rules.iter().any(|rule| rule.nr == nr) {
                    assert_eq!(verdict(&program, arch.audit, nr), SECCOMP_RET_ALLOW, "{arch:?} {nr}");
                }
            }
            // Another architecture's calls kill the process (i386: 0x40000003).
            assert_eq!(verdict(&program, 0x4000_0003, 1), SECCOMP_RET_KILL_PROCESS, "{arch:?}");
        }
        // x86_64 has iopl and ioperm; aarch64 has none.
        for name in ["iopl", "ioperm"] {
            assert_eq!(verdict(&program(&X86_64), X86_64.audit, number(&X86_64, name)), SECCOMP_RET_ERRNO | EPERM, "{name}");
        }
        assert_eq!(verdict(&program(&AARCH64), AARCH64.audit, 172), SECCOMP_RET_ALLOW, "getpid on aarch64");
        // x32 calls fail as on a kernel without x32.
        let x86_64 = program(&X86_64);
        for nr in [0x4000_0000, 0x4000_0000 + 285, u32::MAX] {
            assert_eq!(verdict(&x86_64, X86_64.audit, nr), SECCOMP_RET_ERRNO | ENOSYS);
        }
    }

    #[test]
    fn every_call_has_one_rule_per_architecture() {
        for arch in [&X86_64, &AARCH64] {
            let mut numbers: Vec<u32> = arch.rules.iter().map(|rule| rule.nr).collect();
            let count = numbers.len();
            numbers.sort_unstable();
            numbers.dedup();
            assert_eq!(numbers.len(), count, "{arch:?}");
        }
        // The same calls on both, but x86_64's port I/O.
        let names = |arch: &Arch| arch.rules.iter().map(|rule| rule.name).filter(|name| !name.starts_with("io") || name.starts_with("io_uring")).collect::<Vec<_>>();
        assert_eq!(names(&X86_64), names(&AARCH64));
        assert_eq!(X86_64.rules.len(), AARCH64.rules.len() + 2);
    }

    #[test]
    fn the_compiled_filter_is_an_array_of_sock_filter() {
        let compiled = compiled(&X86_64);
        assert_eq!(compiled.len(), program(&X86_64).len() * 8);
        // The second instruction: jump past the kill when the architecture is x86_64.
        let expected: [u8; 8] = if cfg!(target_endian = "little") {
            [0x15, 0x00, 0x01, 0x00, 0x3e, 0x00, 0x00, 0xc0]
        } else {
            [0x00, 0x15, 0x01, 0x00, 0xc0, 0x00, 0x00, 0x3e]
        };
        assert_eq!(compiled[8..16], expected);
        // The first: load the architecture.
        assert_eq!(compiled[..8], Instruction { code: 0x20, jt: 0, jf: 0, k: 4 }.to_bytes());
        assert_eq!(compiled[..2], 0x20u16.to_ne_bytes());
        assert_eq!(compiled[4..8], 4u32.to_ne_bytes());
        // The last: allow.
        assert_eq!(compiled[compiled.len() - 8..], Instruction { code: 0x06, jt: 0, jf: 0, k: SECCOMP_RET_ALLOW }.to_bytes());
        assert!(native().is_some() || !cfg!(any(target_arch = "x86_64", target_arch = "aarch64")));
    }
}
