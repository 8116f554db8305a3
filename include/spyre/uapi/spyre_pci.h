/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spyre hardware contract: PCI identity and configuration space.
 *
 * Shared by spyre-mockdev (which builds this config space) and the driver
 * (which decodes it). Fixed-width fields only; every offset is asserted.
 * docs/hardware.md describes the same layout for people.
 */
#ifndef SPYRE_UAPI_SPYRE_PCI_H
#define SPYRE_UAPI_SPYRE_PCI_H

#include <stdint.h>

#ifdef __cplusplus
#define SPYRE_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define SPYRE_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

/* ---- Identity ---------------------------------------------------------- */
#define SPYRE_PCI_VENDOR_IBM        0x1014u
#define SPYRE_PCI_DEVICE_PF         0x06a7u
#define SPYRE_PCI_DEVICE_VF         0x06a8u
#define SPYRE_PCI_SUBSYS_ID         0x0001u
#define SPYRE_PCI_REVISION          0x01u
/* Base class 0x12 "processing accelerator", subclass 0, prog-if 0. */
#define SPYRE_PCI_CLASS_CODE        0x120000u

/* SR-IOV: VF i (1-based) has routing ID PF_RID + FIRST_VF_OFFSET + (i-1)*STRIDE. */
#define SPYRE_SRIOV_TOTAL_VFS       16u
#define SPYRE_SRIOV_FIRST_VF_OFFSET 1u
#define SPYRE_SRIOV_VF_STRIDE       1u

/* ---- Configuration space (4 KiB, type-0 header) ------------------------ */
#define SPYRE_CONFIG_SIZE           4096u

#define SPYRE_CFG_VENDOR_ID         0x00u /* u16 */
#define SPYRE_CFG_DEVICE_ID         0x02u /* u16 */
#define SPYRE_CFG_COMMAND           0x04u /* u16 */
#define SPYRE_CFG_STATUS            0x06u /* u16 */
#define SPYRE_CFG_REVISION          0x08u /* u8  */
#define SPYRE_CFG_CLASS_CODE        0x09u /* u24: prog-if, subclass, base class */
#define SPYRE_CFG_HEADER_TYPE       0x0Eu /* u8  */
#define SPYRE_CFG_BAR(n)            (0x10u + 4u * (n)) /* u32 each, BAR0..BAR5 */
#define SPYRE_CFG_SUBSYS_VENDOR_ID  0x2Cu /* u16 */
#define SPYRE_CFG_SUBSYS_ID         0x2Eu /* u16 */
#define SPYRE_CFG_CAP_PTR           0x34u /* u8  */

#define SPYRE_CFG_COMMAND_MEMORY    0x0002u
#define SPYRE_CFG_COMMAND_MASTER    0x0004u
#define SPYRE_CFG_STATUS_CAP_LIST   0x0010u

/* BAR low-dword flag bits (PCI spec). */
#define SPYRE_BAR_MEM_64BIT         0x4u
#define SPYRE_BAR_MEM_PREFETCH      0x8u

/* PCI Express capability (standard list), needed for extended capabilities. */
#define SPYRE_CFG_PCIE_CAP          0x40u
#define SPYRE_PCI_CAP_ID_EXP        0x10u
#define SPYRE_PCIE_CAP_SIZE         0x3Cu

/* SR-IOV extended capability (PF only). */
#define SPYRE_CFG_SRIOV_CAP         0x100u
#define SPYRE_PCI_EXT_CAP_ID_SRIOV  0x0010u
#define SPYRE_PCI_EXT_CAP_VERSION   1u

#define SPYRE_SRIOV_CTRL_VF_ENABLE  0x0001u
#define SPYRE_SRIOV_CTRL_VF_MSE     0x0008u

/* Layout of the SR-IOV capability, as in the PCIe base specification. */
struct spyre_sriov_cap {
    uint32_t header;              /* 0x00 id | version << 16 | next << 20 */
    uint32_t capabilities;        /* 0x04 */
    uint16_t control;             /* 0x08 VF enable, VF memory space enable */
    uint16_t status;              /* 0x0A */
    uint16_t initial_vfs;         /* 0x0C */
    uint16_t total_vfs;           /* 0x0E */
    uint16_t num_vfs;             /* 0x10 */
    uint8_t  func_dep_link;       /* 0x12 */
    uint8_t  reserved0;           /* 0x13 */
    uint16_t first_vf_offset;     /* 0x14 */
    uint16_t vf_stride;           /* 0x16 */
    uint16_t reserved1;           /* 0x18 */
    uint16_t vf_device_id;        /* 0x1A */
    uint32_t supported_page_sizes;/* 0x1C */
    uint32_t system_page_size;    /* 0x20 */
    uint32_t vf_bar[6];           /* 0x24 */
    uint32_t migration_state;     /* 0x3C */
};
SPYRE_STATIC_ASSERT(sizeof(struct spyre_sriov_cap) == 0x40, "SR-IOV capability is 64 bytes");

/* The function's PCI address: card c is bus 0x01 + c, its PF is device 0
 * function 0, VF i sits at devfn = FIRST_VF_OFFSET + (i - 1) * VF_STRIDE. */
#define SPYRE_PCI_DOMAIN            0x0000u
#define SPYRE_PCI_FIRST_BUS         0x01u

#endif /* SPYRE_UAPI_SPYRE_PCI_H */
