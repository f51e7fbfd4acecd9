//! The zero-copy save: the stopped thread's registers go straight into the ThMB its LTN names.
//!
//! **Fast path** ([`save`] first tries it): plain stores through the page table the CPU has
//! loaded — the stopped thread's own view — with fault fix-up (`arch::usercopy`). The page
//! table enforces the view's write right, so the kernel need not look the ThMB up in the view
//! space: a store to memory the thread may not write faults, and the fix-up turns the fault into
//! a fall-back. **Checked path** ([`save_checked`]): the ThMB (and FP area) looked up in the
//! thread's view under the view-space lock, zero-on-touch pages filled, written through the view
//! space; a bad LTN ends the program with a report. Both write exactly the same bytes (frame,
//! FP area and format, then the mask last), so a fast save that faults half-way is simply
//! redone by the checked one.
//!
//! A revoke racing a fast save: the store goes through the root this CPU loaded, which the
//! revoker's kick replaces only when this CPU next enters the scheduler, so a ThMB in a region
//! revoked meanwhile may still be written once — as the thread itself could have written it in
//! user mode an instant earlier. The revoke is ordered after the save.

use alloc::format;
use alloc::string::String;
use arch::mapping::MapFlags;
use arch::trap::TrapFrame;
use core::mem::size_of;
use tsumugi_abi::kn::{mask, FullFrame, FP_AREA_ALIGN, FP_AREA_PTR_OFFSET, FP_AREA_SIZE, FP_FORMAT_OFFSET, FULL_OFFSET, HEADER_SIZE, MASK_OFFSET, THMB_ALIGN};

use crate::mm::view_space::ViewId;
use crate::mm::space;
use crate::thread::Thread;

/// Bytes of a ThMB header the kernel writes.
const THMB_HEADER: u64 = HEADER_SIZE as u64;

/// Why a save did not happen.
pub enum Refused {
    /// LTN = 0: the library is in its own critical section (nothing saved).
    NoThmb,
    /// The LTN names memory the thread may not write: the report that ends the program.
    Bad(String),
}

/// The full frame as bytes.
fn frame_bytes(full: &FullFrame) -> &[u8] {
    // SAFETY: FullFrame is #[repr(C)] plain u64 fields; viewing it as bytes reads initialised
    // memory of exactly its size.
    unsafe { core::slice::from_raw_parts(full as *const FullFrame as *const u8, size_of::<FullFrame>()) }
}

/// Saves `frame` (and FP state) into the ThMB the LTN register names; returns its address.
/// `me` is the running thread; the fall-back checks against its view.
#[inline(always)]
pub fn save(me: &Thread, frame: &TrapFrame) -> Result<u64, Refused> {
    let ltn = arch::cpu::user_ltn();
    if ltn == 0 {
        return Err(Refused::NoThmb);
    }
    let uses_fp = crate::fpu::has_used_fp(me);
    if ltn % THMB_ALIGN == 0 && ltn < arch::layout::KERNEL_HALF && !super::sa_copy::enabled() && save_fast(ltn, frame, uses_fp).is_ok() {
        return Ok(ltn);
    }
    save_other(me, frame, ltn, uses_fp)
}

/// [`save`] when the fast path did not do it: a bad LTN, the `kn=sa` baseline, or a fast save
/// that faulted (then the checked one decides).
#[inline(never)]
fn save_other(me: &Thread, frame: &TrapFrame, ltn: u64, uses_fp: bool) -> Result<u64, Refused> {
    if ltn % THMB_ALIGN != 0 || ltn >= arch::layout::KERNEL_HALF {
        return Err(Refused::Bad(format!("bad LTN {ltn:#x}: not a {THMB_ALIGN}-byte-aligned ThMB address in the user half")));
    }
    if super::sa_copy::enabled() {
        super::sa_copy::save(me, &frame.to_full_frame(), uses_fp);
        return Ok(ltn);
    }
    let view = me.view().ok_or_else(|| Refused::Bad(format!("bad LTN {ltn:#x}: the thread has no view")))?;
    save_checked(view, ltn, &frame.to_full_frame(), uses_fp).map_err(Refused::Bad)?;
    Ok(ltn)
}

/// The fast save through the loaded table. Any failure (a fault, an FP area that needs the
/// checked path's report) leaves the rest to [`save_checked`].
#[inline(always)]
fn save_fast(ltn: u64, frame: &TrapFrame, uses_fp: bool) -> Result<(), ()> {
    let mut saved = mask::FULL;
    if uses_fp {
        saved |= save_fp_fast(ltn)?;
    }
    // SAFETY: called from the running thread's kernel side, so its view's table — whose user
    // half holds only that view's user mappings — is loaded.
    let user = unsafe { arch::usercopy::Access::open() };
    // The mask last (the same routine stores it after the frame): it says what the rest holds.
    const _: () = assert!(MASK_OFFSET + 8 <= FULL_OFFSET && MASK_OFFSET % 8 == 0);
    // SAFETY: `ltn` is THMB_ALIGN-aligned (`save`), so the mask word is aligned, and it lies
    // between `ltn` and the full frame (the assertion above).
    unsafe { frame.store_full_frame(&user, ltn + FULL_OFFSET as u64, ltn + MASK_OFFSET as u64, saved) }.map_err(|_| ())
}

/// The FP part of a fast save: [`mask::FP`] if the state went into the thread's FP area, 0 if
/// it has none.
#[inline(never)]
fn save_fp_fast(ltn: u64) -> Result<u64, ()> {
    // SAFETY (all accesses): as in `save_fast`.
    let area = unsafe { arch::usercopy::get_u64(ltn + FP_AREA_PTR_OFFSET as u64) }.map_err(|_| ())?;
    if area == 0 {
        return Ok(0);
    }
    if area % FP_AREA_ALIGN != 0 || area >= arch::layout::KERNEL_HALF {
        return Err(());
    }
    let wrote = crate::fpu::with_current_state(|state| {
        if state.len() > FP_AREA_SIZE {
            return Err(());
        }
        // SAFETY: as above.
        unsafe { arch::usercopy::copy_to_user(area, state) }.map_err(|_| ())
    });
    match wrote {
        None => Ok(0),
        Some(r) => {
            r?;
            // SAFETY: as above.
            unsafe { arch::usercopy::put_u64(ltn + FP_FORMAT_OFFSET as u64, arch::fpu::thmb_format()) }.map_err(|_| ())?;
            Ok(mask::FP)
        }
    }
}

/// The checked save: the ThMB and FP area looked up in `view`, written through the view space.
/// Returns the report if the thread may not write them.
pub fn save_checked(view: ViewId, ltn: u64, full: &FullFrame, uses_fp: bool) -> Result<(), String> {
    if uses_fp {
        if let Some(r) = crate::fpu::with_current_state(|state| write_checked(view, ltn, full, Some(state))) {
            return r;
        }
    }
    write_checked(view, ltn, full, None)
}

/// Writes a stopped context — the full frame and, if given, the FP state (into the FP area the
/// ThMB names, if any) — into the ThMB at `ltn` through the view space, checked against
/// `view`; the mask last. Returns the report if the thread may not write them.
pub fn write_checked(view: ViewId, ltn: u64, full: &FullFrame, fp: Option<&[u8]>) -> Result<(), String> {
    // Check the whole header before writing any of it.
    let writable = space::with(|s, _| s.check(view, ltn, THMB_HEADER, MapFlags::WRITE).is_ok());
    if !writable {
        return Err(format!("bad LTN {ltn:#x}: the thread's view may not write a ThMB there"));
    }
    space::write_as(view, ltn + FULL_OFFSET as u64, frame_bytes(full)).map_err(|_| format!("bad LTN {ltn:#x}: write refused"))?;
    let saved = mask::FULL | match fp {
        Some(state) => write_fp_checked(view, ltn, state)?,
        None => 0,
    };
    space::write_as(view, ltn + MASK_OFFSET as u64, &saved.to_le_bytes()).map_err(|_| format!("bad LTN {ltn:#x}: write refused"))
}

/// With a FULL save: puts `state` (FP/SIMD registers in the port's save format) into the FP
/// area the ThMB names, so that the library can switch the vCPU to another thread without
/// losing it. Returns [`mask::FP`] if written, 0 if the ThMB names no FP area.
fn write_fp_checked(view: ViewId, ltn: u64, state: &[u8]) -> Result<u64, String> {
    let mut word = [0u8; 8];
    space::read_as(view, ltn + FP_AREA_PTR_OFFSET as u64, &mut word).map_err(|_| format!("bad LTN {ltn:#x}: read refused"))?;
    let area = u64::from_le_bytes(word);
    if area == 0 {
        return Ok(0);
    }
    if area % FP_AREA_ALIGN != 0 || area >= arch::layout::KERNEL_HALF {
        return Err(format!("bad FP area {area:#x} in ThMB {ltn:#x}: not a {FP_AREA_ALIGN}-byte-aligned user address"));
    }
    if state.len() > FP_AREA_SIZE {
        return Err(format!("FP state of {} bytes does not fit the ABI's {FP_AREA_SIZE}-byte area", state.len()));
    }
    space::write_as(view, area, state).map_err(|_| format!("bad FP area {area:#x} in ThMB {ltn:#x}: the thread's view may not write it"))?;
    let format = arch::fpu::thmb_format().to_le_bytes();
    space::write_as(view, ltn + FP_FORMAT_OFFSET as u64, &format).map_err(|_| format!("bad LTN {ltn:#x}: write refused"))?;
    Ok(mask::FP)
}
