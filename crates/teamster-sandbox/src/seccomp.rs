//! The seccomp filter every sandboxed command runs under: `fallocate(2)` fails with
//! `EOPNOTSUPP`. With `FALLOC_FL_KEEP_SIZE` it allocates blocks that `RLIMIT_FSIZE` never checks
//! (one call could fill the host's disk); refused, programs fall back to writing, which the file
//! size limit and the disk quota bound. Everything else is allowed.
//!
//! The filter is a classic BPF program, handed to `bwrap --seccomp FD` compiled: an array of
//! `struct sock_filter` in native byte order. It first checks the architecture a call is made
//! in: a call of another ABI (a 32-bit program on x86_64 entering through `int 0x80`, where
//! `fallocate` has another number) kills the process, since letting it through would let it past
//! the filter, and no program the sandboxes run is one. On x86_64, x32 calls (numbers with bit 30
//! set) fail with `ENOSYS`, as on a kernel built without x32. Only x86_64 and aarch64 have a
//! filter; elsewhere commands run without one.

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
/// `BPF_JMP | BPF_JEQ | BPF_K` and `BPF_JMP | BPF_JGE | BPF_K`.
const JUMP_IF_EQUAL: u16 = 0x15;
const JUMP_IF_AT_LEAST: u16 = 0x35;
/// `BPF_RET | BPF_K`: the verdict `k`.
const RETURN: u16 = 0x06;

/// Offsets in `struct seccomp_data` of the call's number and its architecture.
const NR_OFFSET: u32 = 0;
const ARCH_OFFSET: u32 = 4;

const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const EOPNOTSUPP: u32 = 95;
const ENOSYS: u32 = 38;

/// What the filter needs to know of an architecture.
#[derive(Debug)]
pub(crate) struct Arch {
    /// As in the filter's file name.
    pub(crate) name: &'static str,
    /// `AUDIT_ARCH_*`, as `seccomp_data.arch` holds it.
    audit: u32,
    fallocate: u32,
    /// The bit marking the calls of a second ABI sharing the architecture (x32 on x86_64).
    other_abi_bit: Option<u32>,
}

const X86_64: Arch = Arch { name: "x86_64", audit: 0xC000_003E, fallocate: 285, other_abi_bit: Some(0x4000_0000) };
const AARCH64: Arch = Arch { name: "aarch64", audit: 0xC000_00B7, fallocate: 47, other_abi_bit: None };

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
    // Each test skips the next instruction (its verdict) when the call is not what it tests.
    let unless_equal = |k| Instruction { code: JUMP_IF_EQUAL, jt: 1, jf: 0, k };
    let if_equal = |k| Instruction { code: JUMP_IF_EQUAL, jt: 0, jf: 1, k };
    let if_at_least = |k| Instruction { code: JUMP_IF_AT_LEAST, jt: 0, jf: 1, k };
    let mut program = vec![load(ARCH_OFFSET), unless_equal(arch.audit), ret(SECCOMP_RET_KILL_PROCESS), load(NR_OFFSET)];
    if let Some(bit) = arch.other_abi_bit {
        program.extend([if_at_least(bit), ret(SECCOMP_RET_ERRNO | ENOSYS)]);
    }
    program.extend([if_equal(arch.fallocate), ret(SECCOMP_RET_ERRNO | EOPNOTSUPP), ret(SECCOMP_RET_ALLOW)]);
    program
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
    fn verdict(program: &[Instruction], arch: u32, nr: u32) -> u32 {
        let (mut at, mut accumulator) = (0, 0);
        loop {
            let instruction = program.get(at).expect("every path ends in a verdict");
            at += 1;
            match instruction.code {
                LOAD_WORD if instruction.k == NR_OFFSET => accumulator = nr,
                LOAD_WORD if instruction.k == ARCH_OFFSET => accumulator = arch,
                JUMP_IF_EQUAL | JUMP_IF_AT_LEAST => {
                    let holds = match instruction.code {
                        JUMP_IF_EQUAL => accumulator == instruction.k,
                        _ => accumulator >= instruction.k,
                    };
                    at += usize::from(if holds { instruction.jt } else { instruction.jf });
                }
                RETURN => return instruction.k,
                other => panic!("unexpected instruction {other:#x}"),
            }
        }
    }

    #[test]
    fn fallocate_fails_with_eopnotsupp_and_the_rest_is_allowed() {
        for arch in [&X86_64, &AARCH64] {
            let program = program(arch);
            assert_eq!(verdict(&program, arch.audit, arch.fallocate), 0x0005_005f, "{arch:?}");
            for nr in [0, 1, 59, 221, 284, 286, 435] {
                assert_eq!(verdict(&program, arch.audit, nr), SECCOMP_RET_ALLOW, "{arch:?} {nr}");
            }
            // Another architecture's calls kill the process (i386: 0x40000003).
            assert_eq!(verdict(&program, 0x4000_0003, arch.fallocate), SECCOMP_RET_KILL_PROCESS, "{arch:?}");
        }
        // x32 calls, fallocate among them, fail as on a kernel without x32.
        let x86_64 = program(&X86_64);
        for nr in [0x4000_0000, 0x4000_0000 + 285, u32::MAX] {
            assert_eq!(verdict(&x86_64, X86_64.audit, nr), SECCOMP_RET_ERRNO | ENOSYS);
        }
    }

    #[test]
    fn the_compiled_filter_is_an_array_of_sock_filter() {
        assert_eq!(program(&X86_64).len(), 9);
        assert_eq!(program(&AARCH64).len(), 7);
        let compiled = compiled(&X86_64);
        assert_eq!(compiled.len(), 9 * 8);
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
        assert!(native().is_some() || !cfg!(any(target_arch = "x86_64", target_arch = "aarch64")));
    }
}
