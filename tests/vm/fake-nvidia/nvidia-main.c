// SPDX-License-Identifier: GPL-2.0
/*
 * Stand-in for the NVIDIA driver in gpuinit's VM tests. It presents the
 * kernel interface the tools use, without hardware, checked against
 * NVIDIA/open-gpu-kernel-modules 580.142 (kernel-open/nvidia/nv.c,
 * nv-pci.c, nv-procfs.c, nv-caps.c; kernel-open/common/inc/nv-ioctl.h,
 * nv-ioctl-numbers.h, nv-linux.h) and, where it differs, 595.45.04; the
 * places where it still differs are listed in tests/vm/README.md:
 *  - fake GPUs as software PCI functions on a root bus of their own (a PCI
 *    domain >= 0x10000, as VMD does), so they appear in sysfs, send real
 *    add/bind uevents and can be removed and rescanned;
 *  - a pci_driver named "nvidia" that binds them and gives each the lowest
 *    free minor in probe order; reverse_probe=1 probes them in reverse
 *    listing order, so minors differ from the listing order;
 *  - major 195 named "nvidia"/"nvidiactl" (or legacy "nvidia-frontend"), a
 *    dynamic "nvidia-caps", and /proc/driver/nvidia/{params,version,gpus/}
 *    in the real driver's formats;
 *  - the NVreg_* options, reported in params; NVreg_ExcludedGpus excludes
 *    GPUs by UUID (bound, but never opened: EPERM);
 *  - with mig=N, the MIG capability files of N GPU instances per GPU and
 *    /proc/driver/nvidia-caps/mig-minors, numbered as the real driver does;
 *    with mig_on=1, MIG mode on and no instances; either way, instances
 *    created and destroyed at run time through
 *    /proc/driver/nvidia-test/mig, and so lost at a module reload as at a
 *    reboot, while the MIG mode (a module option here) stays;
 *  - the open/close lifecycle: the first open of /dev/nvidiaN initializes
 *    the GPU (init_ms) and the last close tears it down (deinit_ms), counted
 *    per GPU in /proc/driver/nvidia-test/counters; an opener that comes
 *    while an init runs waits for that init;
 *  - non-blocking open (550.40.07+): with O_NONBLOCK, an open of a GPU that
 *    is not initialized returns at once, the open runs on a workqueue (GPUs
 *    in parallel) and the ioctl NV_ESC_WAIT_OPEN_COMPLETE waits for it and
 *    reports its result; nonblocking_ioctl=0 removes the ioctl and makes
 *    such opens blocking;
 *  - PCI remove (and unbind) waits until no file holds the GPU (not for an
 *    external GPU), refusing new opens meanwhile; rmmod fails while any
 *    file is open (the fops' owner holds the module);
 *  - lost GPUs: writing a PCI address or minor to
 *    /proc/driver/nvidia-test/lose marks that GPU fallen off the bus, with
 *    the real driver's kernel log lines; a GPU named in the external= mask
 *    (an eGPU behind Thunderbolt) is then flagged surprise-removed, the only
 *    case where poll() reports POLLHUP and opens fail with ENODEV.
 */
#include <linux/delay.h>
#include <linux/fs.h>
#include <linux/ioctl.h>
#include <linux/list.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/pci.h>
#include <linux/poll.h>
#include <linux/proc_fs.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/uaccess.h>
#include <linux/wait.h>
#include <linux/workqueue.h>

#define FAKE_MAX_GPUS 16
#define FAKE_CFG_SIZE 256
#define NV_MAJOR 195
#define NV_CTL_MINOR 255

static unsigned int gpus = 2;
module_param(gpus, uint, 0444);
MODULE_PARM_DESC(gpus, "number of fake GPUs (1-16)");
static bool class_0380;
module_param(class_0380, bool, 0444);
MODULE_PARM_DESC(class_0380, "make the last GPU class 0x0380");
static bool audio;
module_param(audio, bool, 0444);
MODULE_PARM_DESC(audio, "add an HDA audio function (0x040300) beside the first GPU");
static bool reverse_probe;
module_param(reverse_probe, bool, 0444);
MODULE_PARM_DESC(reverse_probe, "probe the GPUs in reverse PCI listing order");
static bool legacy_frontend;
module_param(legacy_frontend, bool, 0444);
MODULE_PARM_DESC(legacy_frontend, "register 'nvidia-frontend' as older drivers do");

static unsigned int mig;
module_param(mig, uint, 0444);
MODULE_PARM_DESC(mig, "GPU instances (each with compute instance 0) per GPU, 0-7");
/*
 * A GPU keeps its MIG mode across a reboot (it is stored on the board) but
 * not its instances: mig_on=1 is that state after a reboot, MIG on and no
 * instance, which the "mig" test file then creates.
 */
static bool mig_on;
module_param(mig_on, bool, 0444);
MODULE_PARM_DESC(mig_on, "MIG mode on, with no instances until created through nvidia-test/mig");
/* An A100 or H100 has at most 7 GPU instances at a time. */
#define MIG_MAX_INSTANCES 7

static unsigned int init_ms;
module_param(init_ms, uint, 0444);
MODULE_PARM_DESC(init_ms, "milliseconds the first open of a GPU takes to initialize it");
static unsigned int deinit_ms;
module_param(deinit_ms, uint, 0444);
MODULE_PARM_DESC(deinit_ms, "milliseconds the last close of a GPU takes to tear it down");
static bool nonblocking_ioctl = true;
module_param(nonblocking_ioctl, bool, 0444);
MODULE_PARM_DESC(nonblocking_ioctl,
		 "non-blocking open and NV_ESC_WAIT_OPEN_COMPLETE (0: as drivers before 550.40.07)");
/*
 * RM marks a GPU external when a Thunderbolt bridge is on its way to the
 * root port (src/nvidia/arch/nvalloc/unix/src/osinit.c); only such a GPU is
 * flagged NV_FLAG_IN_SURPRISE_REMOVAL when it falls off the bus, and only
 * its remove goes on while files hold it (nv-pci.c nv_pci_remove).
 */
static unsigned int external;
module_param(external, uint, 0444);
MODULE_PARM_DESC(external, "bit mask of the PCI slots whose GPU is external (an eGPU)");

/* The real driver's options, with its defaults and, like it, no sysfs view. */
static unsigned int NVreg_ResmanDebugLevel = ~0U;
module_param(NVreg_ResmanDebugLevel, uint, 0);
static unsigned int NVreg_DeviceFileUID;
module_param(NVreg_DeviceFileUID, uint, 0);
static unsigned int NVreg_DeviceFileGID;
module_param(NVreg_DeviceFileGID, uint, 0);
static unsigned int NVreg_DeviceFileMode = 0666;
module_param(NVreg_DeviceFileMode, uint, 0);
static unsigned int NVreg_ModifyDeviceFiles = 1;
module_param(NVreg_ModifyDeviceFiles, uint, 0);
static unsigned int NVreg_EnableMSI = 1;
module_param(NVreg_EnableMSI, uint, 0);
static unsigned int NVreg_PreserveVideoMemoryAllocations;
module_param(NVreg_PreserveVideoMemoryAllocations, uint, 0);
static unsigned int NVreg_DynamicPowerManagement = 3;
module_param(NVreg_DynamicPowerManagement, uint, 0);
/* Taken, but (as in the real driver) not listed in params. */
static unsigned int NVreg_EnableNonblockingOpen = 1;
module_param(NVreg_EnableNonblockingOpen, uint, 0);
static char *NVreg_RegistryDwords;
module_param(NVreg_RegistryDwords, charp, 0);
/* Comma-separated GPU UUIDs: bound, but never opened (GPU Excluded: Yes). */
static char *NVreg_ExcludedGpus;
module_param(NVreg_ExcludedGpus, charp, 0);

/*
 * NV_ESC_WAIT_OPEN_COMPLETE (NV_IOCTL_BASE 200 + 18) and its argument, as in
 * kernel-open/common/inc/nv-ioctl-numbers.h and nv-ioctl.h (580.142). The
 * driver looks only at the command's number (_IOC_NR) and size (_IOC_SIZE),
 * never at its type or direction (nv.c nvidia_ioctl).
 */
#define NV_ESC_WAIT_OPEN_COMPLETE 218

struct nv_ioctl_wait_open_complete {
	int rc;			/* 0, or the open's negative errno */
	u32 adapter_status;	/* the RM status: always 0 here */
};
static_assert(sizeof(struct nv_ioctl_wait_open_complete) == 8);

/*
 * A capability file's state (nv-caps.c nv_cap_t): its minor, the mode it
 * reports and DeviceFileModify. Static (in fake_gpu or mig_control_caps), so
 * a file that procfs runs down after its entry is removed still finds it.
 */
struct fake_cap {
	unsigned int minor;
	unsigned int mode;
	int modify;
};

/*
 * The real driver's numbering of MIG capability minors (see mig-minors), as
 * nv-caps.c nv_cap_tables_init (580.142) hands them out in table order: the
 * nvlink table's one entry 0, mig/config 1 and mig/monitor 2, then for
 * gpu0..gpu31 each of gi0..gi14's access file and its ci0..ci7's.
 */
#define MIG_GPUS 32
#define MIG_GIS 15
#define MIG_CIS 8
#define MIG_GI_MINOR(g, i) (3 + 135 * (g) + 9 * (i))
#define MIG_CI_MINOR(g, i, c) (4 + 135 * (g) + 9 * (i) + (c))
/* gi1..giN must stay inside gi0..gi14, or their minors are the next GPU's. */
static_assert(MIG_MAX_INSTANCES < MIG_GIS);

/*
 * A compute instance: what RM registers for it (its ciN directory and
 * access file). slices is the creator's record, -1 when not given, kept
 * only for the stand-in nvidia-smi to read back.
 */
struct fake_ci {
	bool used;
	int slices;
	struct proc_dir_entry *dir;
	struct fake_cap cap;
};

/* A GPU instance, by its id (the swizzId); profile and start as fake_ci's slices. */
struct fake_gi {
	bool used;
	int profile;
	int start;
	struct proc_dir_entry *dir;
	struct fake_cap cap;
	struct fake_ci cis[MIG_CIS];
};

enum gpu_state {
	GPU_DOWN,
	GPU_STARTING,	/* an init runs (init_ms), in an opener or on init_wq */
	GPU_UP,		/* initialized: nv.c's NV_FLAG_OPEN */
	GPU_STOPPING,	/* the last close's teardown runs (deinit_ms) */
};

/*
 * One per slot, static: the fields are under gpu_lock, and waiters may read
 * them with READ_ONCE(); the wait queues and the work live as long as the
 * module.
 */
struct fake_gpu {
	struct pci_dev *pdev;
	int minor;
	bool excluded;
	bool external;		/* an eGPU (the external= mask) */
	bool lost;		/* fallen off the bus (the "lose" file) */
	bool accepting_opens;	/* nv.c's is_accepting_opens: false once remove starts */
	bool removing;		/* NV_FLAG_PCI_REMOVE_IN_PROGRESS */
	enum gpu_state state;
	unsigned int opens;	/* files that hold it: nv.c's usage_count, pending ones too */
	unsigned long inits;
	unsigned long deinits;
	struct list_head files;		/* every file opened on it */
	struct list_head pending;	/* files waiting for an init */
	struct work_struct init_work;
	wait_queue_head_t state_wq;	/* state, opens or a file's done changed */
	struct proc_dir_entry *proc_dir;
	struct proc_dir_entry *caps_dir;
	/* Under mig_lock: capabilities/gpu<minor>/mig, the mode, the instances. */
	struct proc_dir_entry *mig_dir;
	int mig_current, mig_pending;
	struct fake_gi gis[MIG_GIS];
};

/* A GPU file's private data (the control device's is NULL). */
struct nv_file {
	struct fake_gpu *gpu;
	struct list_head file_node;	/* on gpu->files until closed or orphaned */
	struct list_head node;	/* on gpu->pending until its open completes */
	bool done;		/* the open completed, with rc (smp_store_release) */
	int rc;
	bool counted;		/* counted in gpu->opens: the open succeeded or is pending */
	bool orphaned;		/* its external GPU was removed while it was open */
	bool orphan_lost;	/* that GPU was lost when it was removed */
	wait_queue_head_t poll_wq;	/* nv.c's per-file queue: only RM events wake it */
};

/* Config space of slot i function 0 (GPU) and slot 0 function 1 (audio). */
static u8 config[FAKE_MAX_GPUS + 1][FAKE_CFG_SIZE];
static DEFINE_SPINLOCK(config_lock);
static struct fake_gpu gpu_state[FAKE_MAX_GPUS];
static DEFINE_MUTEX(gpu_lock);
static struct workqueue_struct *init_wq;
static int caps_major;
static struct pci_bus *root_bus;
static struct pci_sysdata sysdata = { .node = NUMA_NO_NODE };
static struct resource bus_range = {
	.name = "fake-nvidia buses", .start = 0, .end = 0, .flags = IORESOURCE_BUS,
};
static struct proc_dir_entry *proc_nvidia, *proc_gpus, *proc_test, *proc_caps, *proc_nv_caps;

static u8 *config_of(unsigned int devfn)
{
	unsigned int slot = PCI_SLOT(devfn), fn = PCI_FUNC(devfn);

	if (fn == 0 && slot < gpus)
		return config[slot];
	if (audio && slot == 0 && fn == 1)
		return config[FAKE_MAX_GPUS];
	return NULL;
}

static int fake_read(struct pci_bus *bus, unsigned int devfn, int where, int size, u32 *val)
{
	unsigned long flags;
	u8 *cfg = config_of(devfn);
	u32 v = 0;
	int i;

	if (!cfg || bus->number != 0) {
		*val = ~0U;
		return PCIBIOS_DEVICE_NOT_FOUND;
	}
	/* The PCI core's NVIDIA HDA quirk reads 0x488: bit 25 means "enabled". */
	if (where == 0x488 && size == 4) {
		*val = BIT(25);
		return PCIBIOS_SUCCESSFUL;
	}
	if (where < 0 || where + size > FAKE_CFG_SIZE) {
		*val = 0;
		return PCIBIOS_SUCCESSFUL;
	}
	spin_lock_irqsave(&config_lock, flags);
	for (i = 0; i < size; i++)
		v |= (u32)cfg[where + i] << (8 * i);
	spin_unlock_irqrestore(&config_lock, flags);
	*val = v;
	return PCIBIOS_SUCCESSFUL;
}

static int fake_write(struct pci_bus *bus, unsigned int devfn, int where, int size, u32 val)
{
	unsigned long flags;
	u8 *cfg = config_of(devfn);
	int i;

	if (!cfg || bus->number != 0)
		return PCIBIOS_DEVICE_NOT_FOUND;
	/* Only command and status are writable; BARs stay 0 (unimplemented). */
	if (where < PCI_COMMAND || where + size > PCI_STATUS + 2)
		return PCIBIOS_SUCCESSFUL;
	spin_lock_irqsave(&config_lock, flags);
	for (i = 0; i < size; i++)
		cfg[where + i] = val >> (8 * i);
	spin_unlock_irqrestore(&config_lock, flags);
	return PCIBIOS_SUCCESSFUL;
}

static struct pci_ops fake_ops = { .read = fake_read, .write = fake_write };

static void fill_config(u8 *cfg, u16 device, u32 class, bool multifunction)
{
	memset(cfg, 0, FAKE_CFG_SIZE);
	*(__le16 *)&cfg[PCI_VENDOR_ID] = cpu_to_le16(PCI_VENDOR_ID_NVIDIA);
	*(__le16 *)&cfg[PCI_DEVICE_ID] = cpu_to_le16(device);
	cfg[PCI_REVISION_ID] = 0xa1;
	cfg[PCI_CLASS_PROG] = class & 0xff;
	cfg[PCI_CLASS_DEVICE] = (class >> 8) & 0xff;
	cfg[PCI_CLASS_DEVICE + 1] = (class >> 16) & 0xff;
	cfg[PCI_HEADER_TYPE] = PCI_HEADER_TYPE_NORMAL | (multifunction ? 0x80 : 0);
	*(__le16 *)&cfg[PCI_SUBSYSTEM_VENDOR_ID] = cpu_to_le16(PCI_VENDOR_ID_NVIDIA);
	*(__le16 *)&cfg[PCI_SUBSYSTEM_ID] = cpu_to_le16(0x1533);
}

static struct fake_gpu *gpu_by_minor(int minor);

/* Like the real driver, a GPU probed again gets the lowest free minor. */
static int lowest_free_minor(void)
{
	int minor = 0;

	while (gpu_by_minor(minor))
		minor++;
	return minor;
}

static struct fake_gpu *gpu_by_minor(int minor)
{
	int i;

	for (i = 0; i < FAKE_MAX_GPUS; i++)
		if (gpu_state[i].pdev && gpu_state[i].minor == minor)
			return &gpu_state[i];
	return NULL;
}

/* Completes a file's open with rc; a failed one no longer holds the GPU. */
static void complete_file(struct nv_file *nvf, int rc)
{
	if (rc && nvf->counted) {
		nvf->counted = false;
		nvf->gpu->opens--;
	}
	nvf->rc = rc;
	smp_store_release(&nvf->done, true);
}

/*
 * Initializes a GPU in GPU_STARTING: takes init_ms, in the blocking opener
 * or on init_wq, without gpu_lock. Completes every file waiting for it. A
 * GPU lost meanwhile, or before, fails them with EIO and stays down: its
 * rm_init_adapter() fails (nv.c nv_start_device).
 */
static void gpu_start(struct fake_gpu *gpu)
{
	unsigned long start = jiffies;
	struct nv_file *nvf, *next;
	int rc = 0;

	if (init_ms)
		msleep(init_ms);
	mutex_lock(&gpu_lock);
	if (gpu->lost) {
		rc = -EIO;
		gpu->state = GPU_DOWN;
		pr_err("fake-nvidia: gpu %d (%s) init failed: the GPU is lost\n", gpu->minor,
		       pci_name(gpu->pdev));
	} else {
		gpu->state = GPU_UP;
		gpu->inits++;
		pr_info("fake-nvidia: gpu %d (%s) init done after %u ms\n", gpu->minor,
			pci_name(gpu->pdev), jiffies_to_msecs(jiffies - start));
	}
	list_for_each_entry_safe(nvf, next, &gpu->pending, node) {
		list_del_init(&nvf->node);
		complete_file(nvf, rc);
	}
	wake_up_all(&gpu->state_wq);
	mutex_unlock(&gpu_lock);
}

static void gpu_init_work(struct work_struct *work)
{
	gpu_start(container_of(work, struct fake_gpu, init_work));
}

/*
 * Drops a closed file's hold; the last one tears the GPU down (deinit_ms).
 * Files that came without blocking during the teardown start a new init
 * when it is done: theirs were deferred behind the closer's ldata_lock.
 */
static void file_put(struct nv_file *nvf)
{
	struct fake_gpu *gpu = nvf->gpu;

	mutex_lock(&gpu_lock);
	if (nvf->orphaned) {
		mutex_unlock(&gpu_lock);
		return;
	}
	list_del(&nvf->file_node);
	if (nvf->counted && --gpu->opens == 0 && gpu->state == GPU_UP) {
		gpu->state = GPU_STOPPING;
		mutex_unlock(&gpu_lock);
		if (deinit_ms)
			msleep(deinit_ms);
		mutex_lock(&gpu_lock);
		gpu->state = GPU_DOWN;
		gpu->deinits++;
		pr_info("fake-nvidia: gpu %d (%s) deinit\n", gpu->minor, pci_name(gpu->pdev));
		if (!list_empty(&gpu->pending)) {
			gpu->state = GPU_STARTING;
			pr_info("fake-nvidia: gpu %d (%s) init\n", gpu->minor, pci_name(gpu->pdev));
			queue_work(init_wq, &gpu->init_work);
		}
	}
	wake_up_all(&gpu->state_wq);
	mutex_unlock(&gpu_lock);
}

static bool open_done(struct nv_file *nvf)
{
	return smp_load_acquire(&nvf->done);
}

/*
 * nv.c nv_open_device()'s refusals, in its order (580.142): a remove in
 * progress, an excluded GPU, a GPU flagged surprise-removed (nv-linux.h
 * nv_check_gpu_state: only an external one that fell off the bus).
 */
static int open_refusal(struct fake_gpu *gpu)
{
	if (gpu->removing)
		return -ENODEV;
	if (gpu->excluded) {
		pr_err("NVRM: GPU %s: open() not permitted for excluded GPU\n",
		       pci_name(gpu->pdev));
		return -EPERM;
	}
	if (gpu->lost && gpu->external)
		return -ENODEV;
	return 0;
}

/*
 * As nv.c nvidia_open() (580.142): with O_NONBLOCK (and
 * NVreg_EnableNonblockingOpen), an open of a GPU that is initialized runs at
 * once; any other is deferred to a queue and returns 0, its result left for
 * NV_ESC_WAIT_OPEN_COMPLETE (an excluded GPU's EPERM too), or fails with
 * EBUSY once remove has stopped that queue. A blocking open waits for an
 * init or a teardown in progress and returns the result itself.
 */
static int nv_open(struct inode *inode, struct file *file)
{
	int minor = iminor(inode);
	bool nonblock = (file->f_flags & O_NONBLOCK) && NVreg_EnableNonblockingOpen &&
			nonblocking_ioctl;
	struct fake_gpu *gpu;
	struct nv_file *nvf;
	bool start = false;
	int ret;

	if (minor == NV_CTL_MINOR)
		return 0;
	nvf = kzalloc(sizeof(*nvf), GFP_KERNEL);
	if (!nvf)
		return -ENOMEM;
	INIT_LIST_HEAD(&nvf->node);
	init_waitqueue_head(&nvf->poll_wq);
again:
	mutex_lock(&gpu_lock);
	gpu = gpu_by_minor(minor);
	if (!gpu) {
		ret = -ENODEV;
		goto out_unlock;
	}
	if (nonblock && gpu->state != GPU_UP) {
		if (!gpu->accepting_opens) {
			ret = -EBUSY;
			goto out_unlock;
		}
		nvf->gpu = gpu;
		list_add_tail(&nvf->file_node, &gpu->files);
		file->private_data = nvf;
		ret = open_refusal(gpu);
		if (ret) {
			complete_file(nvf, ret);
			mutex_unlock(&gpu_lock);
			return 0;
		}
		gpu->opens++;
		nvf->counted = true;
		list_add_tail(&nvf->node, &gpu->pending);
		if (gpu->state == GPU_DOWN) {
			gpu->state = GPU_STARTING;
			pr_info("fake-nvidia: gpu %d (%s) init\n", minor, pci_name(gpu->pdev));
			queue_work(init_wq, &gpu->init_work);
		}
		/* GPU_STOPPING: file_put() starts the init after the teardown. */
		mutex_unlock(&gpu_lock);
		return 0;
	}
	ret = open_refusal(gpu);
	if (ret)
		goto out_unlock;
	if (gpu->state == GPU_STOPPING) {
		/* The last close's teardown runs: open when it is done. */
		mutex_unlock(&gpu_lock);
		wait_event(gpu->state_wq, READ_ONCE(gpu->state) != GPU_STOPPING);
		goto again;
	}
	gpu->opens++;
	nvf->counted = true;
	nvf->gpu = gpu;
	list_add_tail(&nvf->file_node, &gpu->files);
	if (gpu->state == GPU_UP) {
		nvf->done = true;
	} else {
		/* Wait for the init in progress, or start one. */
		list_add_tail(&nvf->node, &gpu->pending);
		if (gpu->state == GPU_DOWN) {
			gpu->state = GPU_STARTING;
			pr_info("fake-nvidia: gpu %d (%s) init\n", minor, pci_name(gpu->pdev));
			start = true;
		}
	}
	mutex_unlock(&gpu_lock);
	file->private_data = nvf;
	if (start)
		gpu_start(gpu);
	wait_event(gpu->state_wq, open_done(nvf));
	ret = nvf->rc;
	if (!ret)
		return 0;
	file->private_data = NULL;
	file_put(nvf);
	kfree(nvf);
	return ret;

out_unlock:
	mutex_unlock(&gpu_lock);
	kfree(nvf);
	return ret;
}

static int nv_release(struct inode *inode, struct file *file)
{
	struct nv_file *nvf = file->private_data;

	if (!nvf)
		return 0;
	/* As the real driver, a close waits for the file's open to complete. */
	wait_event(nvf->gpu->state_wq, open_done(nvf));
	file_put(nvf);
	kfree(nvf);
	return 0;
}

/*
 * As nv.c nvidia_ioctl() (580.142): on a GPU file every ioctl first waits
 * (interruptibly) for the file's open. NV_ESC_WAIT_OPEN_COMPLETE, matched
 * by number, needs the 8-byte size and reports the open's result (0 on
 * nvidiactl). Every other command goes to RM, which knows none of them
 * here: EINVAL, as for a lost GPU's; EIO on a file whose open failed (it has
 * no device). With nonblocking_ioctl=0 (a driver before 550.40.07) RM does
 * not know NV_ESC_WAIT_OPEN_COMPLETE either.
 */
static long nv_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct nv_ioctl_wait_open_complete params;
	struct nv_file *nvf = file->private_data;

	if (nvf && wait_event_interruptible(nvf->gpu->state_wq, open_done(nvf)))
		return -ERESTARTSYS;
	if (nonblocking_ioctl && _IOC_NR(cmd) == NV_ESC_WAIT_OPEN_COMPLETE) {
		if (_IOC_SIZE(cmd) != sizeof(params))
			return -EINVAL;
		if (copy_from_user(&params, (void __user *)arg, sizeof(params)))
			return -EFAULT;
		params.rc = nvf ? nvf->rc : 0;
		params.adapter_status = 0;
		if (copy_to_user((void __user *)arg, &params, sizeof(params)))
			return -EFAULT;
		return 0;
	}
	if (nvf && nvf->rc)
		return -EIO;
	return -EINVAL;
}

/*
 * As nv.c nvidia_poll() (580.142): POLLERR for a file whose open is in
 * progress or failed; POLLHUP, without waiting, for a GPU flagged
 * surprise-removed (an external one that fell off the bus); else only a
 * file opened without O_NONBLOCK waits, on its own queue, which only RM
 * events posted to that file (nv_post_event) wake: none here, so a healthy
 * GPU's files, and a lost internal GPU's, report nothing and wake nobody.
 * nvidiactl reports nothing either.
 */
static __poll_t nv_poll(struct file *file, poll_table *wait)
{
	struct nv_file *nvf = file->private_data;
	bool surprise_removed;

	if (!nvf)
		return 0;
	if (!open_done(nvf) || nvf->rc)
		return EPOLLERR;
	mutex_lock(&gpu_lock);
	surprise_removed = nvf->orphaned ? nvf->orphan_lost
					 : nvf->gpu->lost && nvf->gpu->external;
	mutex_unlock(&gpu_lock);
	if (surprise_removed)
		return EPOLLHUP;
	if (!(file->f_flags & O_NONBLOCK))
		poll_wait(file, &nvf->poll_wq, wait);
	return 0;
}

static const struct file_operations nv_fops = {
	.owner = THIS_MODULE,
	.open = nv_open,
	.release = nv_release,
	.unlocked_ioctl = nv_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.poll = nv_poll,
	.llseek = noop_llseek,
};

/* Any minor opens and nothing else happens, as nv-caps.c nv_cap_drv_open (580.142). */
static int caps_open(struct inode *inode, struct file *file)
{
	return 0;
}

static const struct file_operations caps_fops = {
	.owner = THIS_MODULE,
	.open = caps_open,
};

/* The board's UUID comes from its slot only: it stays across rebinds. */
static void gpu_uuid(const struct pci_dev *pdev, char *buf, size_t size)
{
	unsigned int slot = PCI_SLOT(pdev->devfn);

	snprintf(buf, size, "GPU-%08x-5b8b-16a1-87d4-ce157bba%04x", 0x558ce120 + slot, slot);
}

static int information_show(struct seq_file *m, void *v)
{
	struct fake_gpu *gpu = m->private;
	struct pci_dev *pdev = gpu->pdev;
	char uuid[48];

	gpu_uuid(pdev, uuid, sizeof(uuid));
	seq_printf(m, "Model: \t\t NVIDIA A100 80GB PCIe\n");
	seq_printf(m, "IRQ:   \t\t %d\n", pdev->irq);
	seq_printf(m, "GPU UUID: \t %s\n", uuid);
	seq_printf(m, "Video BIOS: \t 92.00.36.00.01\n");
	seq_printf(m, "Bus Type: \t PCIe\n");
	seq_printf(m, "DMA Size: \t 47 bits\n");
	seq_printf(m, "DMA Mask: \t 0x7fffffffffff\n");
	seq_printf(m, "Bus Location: \t %s\n", pci_name(pdev));
	seq_printf(m, "Device Minor: \t %d\n", gpu->minor);
	seq_printf(m, "GPU Firmware: \t N/A\n");
	seq_printf(m, "GPU Excluded:\t %s\n", gpu->excluded ? "Yes" : "No");
	return 0;
}

/* No per-GPU registry keys: the real file's line for that (0000:00:06.0, 580.159.04). */
static int registry_show(struct seq_file *m, void *v)
{
	seq_printf(m, "Binary: \"\"\n");
	return 0;
}

/* A PCIe data-centre GPU's power file (0000:00:06.0, 580.159.04). */
static int power_show(struct seq_file *m, void *v)
{
	seq_printf(m, "Runtime D3 status:          Disabled by default\n");
	seq_printf(m, "Video Memory:               Active\n\n");
	seq_printf(m, "GPU Hardware Support:\n");
	seq_printf(m, " Video Memory Self Refresh: Not Supported\n");
	seq_printf(m, " Video Memory Off:          Not Supported\n\n");
	seq_printf(m, "S0ix Power Management:\n");
	seq_printf(m, " Platform Support:          Not Supported\n");
	seq_printf(m, " Status:                    Disabled\n\n");
	seq_printf(m, "Notebook Dynamic Boost:     Not Supported\n");
	return 0;
}

/* The real driver's order: numbers (decimal) first, then quoted strings. */
static int params_show(struct seq_file *m, void *v)
{
	seq_printf(m, "ResmanDebugLevel: %u\n", NVreg_ResmanDebugLevel);
	seq_printf(m, "ModifyDeviceFiles: %u\n", NVreg_ModifyDeviceFiles);
	seq_printf(m, "DeviceFileUID: %u\n", NVreg_DeviceFileUID);
	seq_printf(m, "DeviceFileGID: %u\n", NVreg_DeviceFileGID);
	seq_printf(m, "DeviceFileMode: %u\n", NVreg_DeviceFileMode);
	seq_printf(m, "EnableMSI: %u\n", NVreg_EnableMSI);
	seq_printf(m, "PreserveVideoMemoryAllocations: %u\n", NVreg_PreserveVideoMemoryAllocations);
	seq_printf(m, "DynamicPowerManagement: %u\n", NVreg_DynamicPowerManagement);
	seq_printf(m, "RegistryDwords: \"%s\"\n", NVreg_RegistryDwords ?: "");
	seq_printf(m, "ExcludedGpus: \"%s\"\n", NVreg_ExcludedGpus ?: "");
	return 0;
}

/* Whether NVreg_ExcludedGpus names this UUID (comma-separated, any case). */
static bool uuid_excluded(const char *uuid)
{
	const char *list = NVreg_ExcludedGpus;
	size_t len = strlen(uuid);

	while (list && *list) {
		const char *end = strchrnul(list, ',');

		if (end - list == len && !strncasecmp(list, uuid, len))
			return true;
		list = *end ? end + 1 : end;
	}
	return false;
}

static int version_show(struct seq_file *m, void *v)
{
	/*
	 * The real 535.129.03 driver's lines: two spaces around the version,
	 * its build date, and "gcc -v"'s last line with its trailing space.
	 */
	seq_printf(m, "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  "
		   "Thu Oct 19 18:56:32 UTC 2023\n");
	seq_printf(m, "GCC version:  gcc version %s \n", __VERSION__);
	return 0;
}

static int counters_show(struct seq_file *m, void *v)
{
	int i;

	mutex_lock(&gpu_lock);
	seq_printf(m, "# minor bdf inits deinits opens lost\n");
	for (i = 0; i < FAKE_MAX_GPUS; i++)
		if (gpu_state[i].pdev)
			seq_printf(m, "%d %s %lu %lu %u %d\n", gpu_state[i].minor,
				   pci_name(gpu_state[i].pdev), gpu_state[i].inits,
				   gpu_state[i].deinits, gpu_state[i].opens, gpu_state[i].lost);
	mutex_unlock(&gpu_lock);
	return 0;
}

/*
 * "lose": a PCI address or a minor marks that GPU fallen off the bus, as
 * RM's osHandleGpuLost() (src/nvidia/arch/nvalloc/unix/src/osinit.c,
 * 580.142) does when a register reads back wrong: its lines in the kernel
 * log, and for an external GPU only, NV_FLAG_IN_SURPRISE_REMOVAL. Nothing
 * wakes a poller: nv.c has no wake-up for it.
 */
static ssize_t lose_write(struct file *file, const char __user *ubuf, size_t count,
			  loff_t *ppos)
{
	struct fake_gpu *gpu = NULL;
	char buf[32], *name;
	int i, minor;

	if (count >= sizeof(buf))
		return -EINVAL;
	if (copy_from_user(buf, ubuf, count))
		return -EFAULT;
	buf[count] = '\0';
	name = strim(buf);
	if (kstrtoint(name, 10, &minor))
		minor = -1;
	mutex_lock(&gpu_lock);
	for (i = 0; i < FAKE_MAX_GPUS; i++)
		if (gpu_state[i].pdev && (gpu_state[i].minor == minor ||
					  !strcmp(pci_name(gpu_state[i].pdev), name)))
			gpu = &gpu_state[i];
	if (gpu && !gpu->lost) {
		struct pci_dev *pdev = gpu->pdev;

		gpu->lost = true;
		/* kernel_rc.c's Xid line (no process: pid and name left out), then os.c's. */
		pr_err("NVRM: Xid (PCI:%04x:%02x:%02x): 79, GPU has fallen off the bus.\n",
		       pci_domain_nr(pdev->bus), pdev->bus->number, PCI_SLOT(pdev->devfn));
		pr_err("NVRM: GPU %s: GPU has fallen off the bus.\n", pci_name(pdev));
		pr_info("fake-nvidia: gpu %d (%s) lost with %u open file(s)%s\n", gpu->minor,
			pci_name(pdev), gpu->opens, gpu->external ? " (external)" : "");
	}
	mutex_unlock(&gpu_lock);
	return gpu ? count : -ENODEV;
}

static const struct proc_ops lose_ops = {
	.proc_write = lose_write,
	.proc_lseek = noop_llseek,
};

/*
 * A capability's file (access, mig/config, mig/monitor), as nv-caps.c
 * (580.142): mode 0444 whatever the capability's own mode, so only root
 * (CAP_DAC_OVERRIDE) opens it for writing. Each open file buffers what is
 * written to it (128 bytes with the NUL: ENOSPC beyond, EINVAL for an empty
 * write) and shows the flag as it was at the open; the close parses the
 * buffer with sscanf("DeviceFileModify: %d") and only then sets the flag.
 * New caps start with NVreg_ModifyDeviceFiles.
 */
#define CAP_WRITE_BUF_SIZE 128

/* An open cap file: nv-caps.c's nv_cap_file_private_t. */
struct cap_file {
	struct fake_cap *cap;
	int modify;	/* the flag when the file was opened */
	char buffer[CAP_WRITE_BUF_SIZE];
	size_t offset;
};

/* config and monitor; the instances' caps are in their fake_gpu. */
static struct fake_cap mig_control_caps[2];
static DEFINE_MUTEX(cap_lock);
/* Each GPU's mig_dir, MIG mode and instances; taken before gpu_lock. */
static DEFINE_MUTEX(mig_lock);

static int cap_show(struct seq_file *m, void *v)
{
	struct cap_file *open = m->private;

	seq_printf(m, "DeviceFileMinor: %u\n", open->cap->minor);
	seq_printf(m, "DeviceFileMode: %u\n", open->cap->mode);
	seq_printf(m, "DeviceFileModify: %d\n", open->modify);
	return 0;
}

static int cap_open(struct inode *inode, struct file *file)
{
	struct cap_file *open = kzalloc(sizeof(*open), GFP_KERNEL);
	int ret;

	if (!open)
		return -ENOMEM;
	open->cap = pde_data(inode);
	mutex_lock(&cap_lock);
	open->modify = open->cap->modify;
	mutex_unlock(&cap_lock);
	ret = single_open(file, cap_show, open);
	if (ret)
		kfree(open);
	return ret;
}

static ssize_t cap_write(struct file *file, const char __user *buf, size_t count, loff_t *pos)
{
	struct cap_file *open = ((struct seq_file *)file->private_data)->private;
	size_t left = sizeof(open->buffer) - open->offset - 1;

	if (count == 0)
		return -EINVAL;
	if (left == 0 || count > left)
		return -ENOSPC;
	if (copy_from_user(open->buffer + open->offset, buf, count))
		return -EFAULT;
	open->offset += count;
	open->buffer[open->offset] = '\0';
	*pos = open->offset;
	return count;
}

static int cap_release(struct inode *inode, struct file *file)
{
	struct cap_file *open = ((struct seq_file *)file->private_data)->private;
	int modify;

	single_release(inode, file);
	if (open->offset && sscanf(open->buffer, "DeviceFileModify: %d", &modify) == 1) {
		mutex_lock(&cap_lock);
		open->cap->modify = modify;
		mutex_unlock(&cap_lock);
	}
	kfree(open);
	return 0;
}

static const struct proc_ops cap_ops = {
	.proc_open = cap_open,
	.proc_read = seq_read,
	.proc_write = cap_write,
	.proc_lseek = seq_lseek,
	.proc_release = cap_release,
};

static void add_cap(struct proc_dir_entry *dir, const char *name, struct fake_cap *cap,
		    unsigned int minor, unsigned int mode)
{
	cap->minor = minor;
	cap->mode = mode;
	cap->modify = NVreg_ModifyDeviceFiles;
	proc_create_data(name, 0444, dir, &cap_ops, cap);
}

static int mig_minors_show(struct seq_file *m, void *v)
{
	int g, i, c;

	seq_printf(m, "config 1\nmonitor 2\n");
	for (g = 0; g < MIG_GPUS; g++)
		for (i = 0; i < MIG_GIS; i++) {
			seq_printf(m, "gpu%d/gi%d/access %d\n", g, i, MIG_GI_MINOR(g, i));
			for (c = 0; c < MIG_CIS; c++)
				seq_printf(m, "gpu%d/gi%d/ci%d/access %d\n", g, i, c,
					   MIG_CI_MINOR(g, i, c));
		}
	return 0;
}

/* No instance left (their entries are gone with their directory). */
static void clear_instances(struct fake_gpu *gpu)
{
	unsigned int g;

	for (g = 0; g < MIG_GIS; g++)
		gpu->gis[g] = (struct fake_gi){};
}

/*
 * Instances, as RM registers them with the capability framework
 * (src/nvidia/arch/nvalloc/unix/src/os.c osRmCapRegisterSmcPartition and
 * osRmCapRegisterSmcExecutionPartition, 580.142, called from
 * kernel_mig_manager.c when an instance is created or restored): a
 * directory gi<swizzId> (mode OS_RUGO | OS_XUGO) holding an access file
 * (OS_RUGO), and in it ci<id> with its own access file; nv-caps.c
 * nv_cap_create_file_entry gives each access file the minor of its path in
 * the static tables (mig-minors), and nv_cap_alloc DeviceFileModify
 * NVreg_ModifyDeviceFiles. A destroyed instance's entries go
 * (osRmCapUnregister, files before their directory). All under mig_lock.
 */
static int mig_create_gi(struct fake_gpu *gpu, unsigned int id, int profile, int start)
{
	struct fake_gi *gi;
	char name[8];

	if (!gpu->mig_dir || !gpu->mig_current)
		return -EOPNOTSUPP;
	if (id >= MIG_GIS)
		return -EINVAL;
	gi = &gpu->gis[id];
	if (gi->used)
		return -EEXIST;
	snprintf(name, sizeof(name), "gi%u", id);
	*gi = (struct fake_gi){};
	gi->dir = proc_mkdir_mode(name, 0555, gpu->mig_dir);
	if (!gi->dir)
		return -ENOMEM;
	add_cap(gi->dir, "access", &gi->cap, MIG_GI_MINOR(gpu->minor, id), 0444);
	gi->used = true;
	gi->profile = profile;
	gi->start = start;
	return 0;
}

static int mig_create_ci(struct fake_gpu *gpu, unsigned int gi_id, unsigned int id, int slices)
{
	struct fake_ci *ci;
	char name[8];

	if (!gpu->mig_dir || !gpu->mig_current)
		return -EOPNOTSUPP;
	if (gi_id >= MIG_GIS || id >= MIG_CIS)
		return -EINVAL;
	if (!gpu->gis[gi_id].used)
		return -ENOENT;
	ci = &gpu->gis[gi_id].cis[id];
	if (ci->used)
		return -EEXIST;
	snprintf(name, sizeof(name), "ci%u", id);
	*ci = (struct fake_ci){};
	ci->dir = proc_mkdir_mode(name, 0555, gpu->gis[gi_id].dir);
	if (!ci->dir)
		return -ENOMEM;
	add_cap(ci->dir, "access", &ci->cap, MIG_CI_MINOR(gpu->minor, gi_id, id), 0444);
	ci->used = true;
	ci->slices = slices;
	return 0;
}

static int mig_destroy_ci(struct fake_gpu *gpu, unsigned int gi_id, unsigned int id)
{
	struct fake_ci *ci;

	if (!gpu->mig_dir)
		return -EOPNOTSUPP;
	if (gi_id >= MIG_GIS || id >= MIG_CIS)
		return -EINVAL;
	ci = &gpu->gis[gi_id].cis[id];
	if (!gpu->gis[gi_id].used || !ci->used)
		return -ENOENT;
	proc_remove(ci->dir);
	*ci = (struct fake_ci){};
	return 0;
}

/* As NVML's nvmlGpuInstanceDestroy: refused (EBUSY) while it has compute instances. */
static int mig_destroy_gi(struct fake_gpu *gpu, unsigned int id)
{
	unsigned int c;

	if (!gpu->mig_dir)
		return -EOPNOTSUPP;
	if (id >= MIG_GIS)
		return -EINVAL;
	if (!gpu->gis[id].used)
		return -ENOENT;
	for (c = 0; c < MIG_CIS; c++)
		if (gpu->gis[id].cis[c].used)
			return -EBUSY;
	proc_remove(gpu->gis[id].dir);
	gpu->gis[id] = (struct fake_gi){};
	return 0;
}

/*
 * capabilities/gpu<minor>/mig, as os.c osRmCapRegisterGpu (580.142) makes
 * for every GPU when RM attaches it (here only with MIG, see README.md),
 * then mig=N's instances gi1..giN, each with ci0 (no profile recorded:
 * they overlap, as no real GPU's could).
 */
static void add_mig_instances(struct fake_gpu *gpu)
{
	char name[16];
	unsigned int i;

	snprintf(name, sizeof(name), "gpu%d", gpu->minor);
	mutex_lock(&mig_lock);
	clear_instances(gpu);
	gpu->mig_current = gpu->mig_pending = 1;
	gpu->caps_dir = proc_mkdir(name, proc_caps);
	gpu->mig_dir = gpu->caps_dir ? proc_mkdir("mig", gpu->caps_dir) : NULL;
	for (i = 1; i <= mig && gpu->mig_dir; i++)
		if (mig_create_gi(gpu, i, -1, -1) || mig_create_ci(gpu, i, 0, -1))
			pr_err("fake-nvidia: gpu %d: cannot create GI %u\n", gpu->minor, i);
	mutex_unlock(&mig_lock);
}

/* Every instance's entries go with the GPU's directory. */
static void remove_mig_instances(struct fake_gpu *gpu)
{
	mutex_lock(&mig_lock);
	proc_remove(gpu->caps_dir);
	gpu->caps_dir = NULL;
	gpu->mig_dir = NULL;
	clear_instances(gpu);
	mutex_unlock(&mig_lock);
}

/*
 * nvidia-test/mig, read: every MIG GPU's mode and instances, one record a
 * line, in minor order, for the stand-in nvidia-smi (it is the driver's
 * state, not a real file):
 *   gpu <minor> mig <current> <pending>
 *   gi <minor> <gi> [<profile> <start>]
 *   ci <minor> <gi> <ci> [<slices>]
 * the bracketed numbers only where the creator gave them.
 */
static int mig_show(struct seq_file *m, void *v)
{
	struct fake_gpu *gpu;
	unsigned int g, c;
	int minor;

	mutex_lock(&mig_lock);
	mutex_lock(&gpu_lock);
	for (minor = 0; minor < FAKE_MAX_GPUS; minor++) {
		gpu = gpu_by_minor(minor);
		if (!gpu || !gpu->mig_dir)
			continue;
		seq_printf(m, "gpu %d mig %d %d\n", minor, gpu->mig_current, gpu->mig_pending);
		for (g = 0; g < MIG_GIS; g++) {
			struct fake_gi *gi = &gpu->gis[g];

			if (!gi->used)
				continue;
			if (gi->profile >= 0)
				seq_printf(m, "gi %d %u %d %d\n", minor, g, gi->profile, gi->start);
			else
				seq_printf(m, "gi %d %u\n", minor, g);
			for (c = 0; c < MIG_CIS; c++) {
				if (!gi->cis[c].used)
					continue;
				if (gi->cis[c].slices >= 0)
					seq_printf(m, "ci %d %u %u %d\n", minor, g, c, gi->cis[c].slices);
				else
					seq_printf(m, "ci %d %u %u\n", minor, g, c);
			}
		}
	}
	mutex_unlock(&gpu_lock);
	mutex_unlock(&mig_lock);
	return 0;
}

/*
 * One command, as RM's instance creation and destruction would register and
 * unregister the capabilities:
 *   create-gi <minor> <gi> [<profile> <start>]   create-ci <minor> <gi> <ci> [<slices>]
 *   destroy-ci <minor> <gi> <ci>                 destroy-gi <minor> <gi>
 *   mode <minor> <current> <pending>
 * ENODEV: no such GPU; EOPNOTSUPP: MIG is off (or the module has no MIG);
 * EINVAL: an id out of the driver's tables or a malformed line; EEXIST,
 * ENOENT; EBUSY: a GI with CIs, or a mode change while instances exist
 * (only a reset, which destroys them, changes the mode of a real GPU).
 */
static int mig_command(const char *line)
{
	int minor, a, b, c, d, end = -1, ret;
	struct fake_gpu *gpu;
	char verb[12];
	unsigned int g;

	if (sscanf(line, "%11s %d%n", verb, &minor, &end) != 2)
		return -EINVAL;
	line += end;
	a = b = c = d = -1;
	mutex_lock(&mig_lock);
	mutex_lock(&gpu_lock);
	gpu = gpu_by_minor(minor);
	mutex_unlock(&gpu_lock);
	ret = -ENODEV;
	if (!gpu)
		goto out;
	ret = -EINVAL;
	if (!strcmp(verb, "create-gi")) {
		int n = sscanf(line, "%d %d %d %d", &a, &b, &c, &d);

		if ((n == 1 || n == 3) && a >= 0 && (n == 1 || (b >= 0 && c >= 0)))
			ret = mig_create_gi(gpu, a, b, c);
	} else if (!strcmp(verb, "create-ci")) {
		int n = sscanf(line, "%d %d %d %d", &a, &b, &c, &d);

		if ((n == 2 || n == 3) && a >= 0 && b >= 0 && (n == 2 || c > 0))
			ret = mig_create_ci(gpu, a, b, c);
	} else if (!strcmp(verb, "destroy-ci")) {
		if (sscanf(line, "%d %d %d", &a, &b, &c) == 2 && a >= 0 && b >= 0)
			ret = mig_destroy_ci(gpu, a, b);
	} else if (!strcmp(verb, "destroy-gi")) {
		if (sscanf(line, "%d %d", &a, &b) == 1 && a >= 0)
			ret = mig_destroy_gi(gpu, a);
	} else if (!strcmp(verb, "mode")) {
		if (sscanf(line, "%d %d %d", &a, &b, &c) == 2 && (a == 0 || a == 1) &&
		    (b == 0 || b == 1)) {
			ret = gpu->mig_dir ? 0 : -EOPNOTSUPP;
			for (g = 0; g < MIG_GIS && !ret; g++)
				if (gpu->gis[g].used && a != gpu->mig_current)
					ret = -EBUSY;
			if (!ret) {
				gpu->mig_current = a;
				gpu->mig_pending = b;
			}
		}
	}
out:
	mutex_unlock(&mig_lock);
	if (!ret)
		pr_info("fake-nvidia: mig %s %d%s\n", verb, minor, line);
	return ret;
}

/* One command a write (a trailing newline allowed). */
static ssize_t mig_write(struct file *file, const char __user *ubuf, size_t count, loff_t *ppos)
{
	char buf[64];
	int ret;

	if (count == 0 || count >= sizeof(buf))
		return -EINVAL;
	if (copy_from_user(buf, ubuf, count))
		return -EFAULT;
	buf[count] = '\0';
	if (strchr(strim(buf), '\n'))
		return -EINVAL;
	ret = mig_command(strim(buf));
	return ret ? ret : count;
}

static int mig_open(struct inode *inode, struct file *file)
{
	return single_open(file, mig_show, NULL);
}

static const struct proc_ops mig_ops = {
	.proc_open = mig_open,
	.proc_read = seq_read,
	.proc_write = mig_write,
	.proc_lseek = seq_lseek,
	.proc_release = single_release,
};

static int nv_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	unsigned int slot = PCI_SLOT(pdev->devfn);
	struct fake_gpu *gpu;
	char uuid[48];
	int ret;

	if (pdev->bus != root_bus || slot >= gpus)
		return -ENODEV;
	ret = pci_enable_device(pdev);
	if (ret)
		return ret;
	mutex_lock(&gpu_lock);
	gpu = &gpu_state[slot];
	gpu->minor = lowest_free_minor();
	gpu_uuid(pdev, uuid, sizeof(uuid));
	gpu->excluded = uuid_excluded(uuid);
	gpu->external = external & BIT(slot);
	gpu->pdev = pdev;
	gpu->opens = 0;
	gpu->state = GPU_DOWN;
	gpu->lost = false;
	gpu->accepting_opens = true;
	gpu->removing = false;
	mutex_unlock(&gpu_lock);
	/*
	 * nv-procfs.c nv_procfs_add_gpu() (580.142): information, registry and
	 * power; numa_status and offline_pages only on a GPU whose memory the
	 * platform makes NUMA memory (a self-hosted, coherent one on aarch64,
	 * nv-pci.c nv_init_coherent_link_info), never on a PCIe GPU like these.
	 */
	gpu->proc_dir = proc_mkdir(pci_name(pdev), proc_gpus);
	if (gpu->proc_dir) {
		proc_create_single_data("information", 0444, gpu->proc_dir, information_show, gpu);
		proc_create_single_data("registry", 0644, gpu->proc_dir, registry_show, gpu);
		proc_create_single_data("power", 0444, gpu->proc_dir, power_show, gpu);
	}
	if ((mig || mig_on) && gpu->minor < MIG_GPUS)
		add_mig_instances(gpu);
	pci_set_drvdata(pdev, gpu);
	dev_info(&pdev->dev, "fake-nvidia: bound as minor %d%s\n", gpu->minor,
		 gpu->excluded ? " (excluded)" : "");
	return 0;
}

/* No file holds the GPU and no teardown runs. */
static bool gpu_released(struct fake_gpu *gpu)
{
	return !READ_ONCE(gpu->opens) && READ_ONCE(gpu->state) == GPU_DOWN;
}

static bool gpu_settled(struct fake_gpu *gpu)
{
	enum gpu_state state = READ_ONCE(gpu->state);

	return state == GPU_UP || state == GPU_DOWN;
}

/*
 * An external GPU's remove goes on while files hold it: the adapter is
 * shut down (a deinit) and the files are left with a device that is gone.
 */
static void orphan_files(struct fake_gpu *gpu)
{
	struct nv_file *nvf, *next;
	unsigned int opens = gpu->opens;

	list_for_each_entry_safe(nvf, next, &gpu->files, file_node) {
		list_del(&nvf->file_node);
		nvf->orphaned = true;
		nvf->orphan_lost = gpu->lost;
	}
	if (gpu->state == GPU_UP) {
		gpu->deinits++;
		pr_info("fake-nvidia: gpu %d (%s) deinit\n", gpu->minor, pci_name(gpu->pdev));
	}
	gpu->opens = 0;
	gpu->state = GPU_DOWN;
	pr_info("fake-nvidia: gpu %d (%s) removed with %u open file(s) (external)\n", gpu->minor,
		pci_name(gpu->pdev), opens);
}

/*
 * As nv-pci.c nv_pci_remove() (580.142): the queue of deferred opens is
 * stopped (O_NONBLOCK opens of a GPU that is not initialized fail with
 * EBUSY) and flushed, then NV_FLAG_PCI_REMOVE_IN_PROGRESS refuses the
 * others (ENODEV); while files hold the GPU it waits, in 500 ms steps, so
 * the kernel sends the remove or unbind uevent only after the last close.
 * An external GPU's remove does not wait (its sanity check is skipped).
 */
static void nv_remove(struct pci_dev *pdev)
{
	struct fake_gpu *gpu = pci_get_drvdata(pdev);
	unsigned int opens;

	mutex_lock(&gpu_lock);
	gpu->accepting_opens = false;
	while (!gpu_settled(gpu)) {
		mutex_unlock(&gpu_lock);
		wait_event(gpu->state_wq, gpu_settled(gpu));
		mutex_lock(&gpu_lock);
	}
	gpu->removing = true;
	opens = gpu->opens;
	if (gpu->external)
		orphan_files(gpu);
	mutex_unlock(&gpu_lock);
	if (opens && !gpu->external)
		pr_info("fake-nvidia: gpu %d (%s) remove waits for %u open file(s)\n", gpu->minor,
			pci_name(pdev), opens);
	while (!wait_event_timeout(gpu->state_wq, gpu_released(gpu), msecs_to_jiffies(500)))
		;
	proc_remove(gpu->proc_dir);
	remove_mig_instances(gpu);
	mutex_lock(&gpu_lock);
	gpu->pdev = NULL;
	gpu->proc_dir = NULL;
	mutex_unlock(&gpu_lock);
	pci_disable_device(pdev);
	dev_info(&pdev->dev, "fake-nvidia: unbound minor %d\n", gpu->minor);
}

static const struct pci_device_id nv_ids[] = {
	{ PCI_DEVICE(PCI_VENDOR_ID_NVIDIA, PCI_ANY_ID),
	  .class = PCI_BASE_CLASS_DISPLAY << 16, .class_mask = 0xff0000 },
	{ }
};

static struct pci_driver nv_driver = {
	.name = "nvidia",
	.id_table = nv_ids,
	.probe = nv_probe,
	.remove = nv_remove,
};

int nvidia_fake_uvm_register(void)
{
	return 0;
}
EXPORT_SYMBOL_GPL(nvidia_fake_uvm_register);

static int choose_domain(void)
{
	struct pci_bus *bus = NULL;
	int domain = 0xffff;

	while ((bus = pci_find_next_bus(bus)))
		domain = max(domain, pci_domain_nr(bus));
	return domain + 1;
}

static int create_bus(void)
{
	LIST_HEAD(resources);
	unsigned int i;

	for (i = 0; i < gpus; i++) {
		u32 class = (class_0380 && i == gpus - 1) ? 0x038000 : 0x030200;

		fill_config(config[i], 0x20b5, class, audio && i == 0);
	}
	if (audio)
		fill_config(config[FAKE_MAX_GPUS], 0x1aef, 0x040300, false);

	pci_lock_rescan_remove();
	sysdata.domain = choose_domain();
	pci_add_resource(&resources, &bus_range);
	root_bus = pci_create_root_bus(NULL, 0, &fake_ops, &sysdata, &resources);
	if (!root_bus) {
		pci_free_resource_list(&resources);
		pci_unlock_rescan_remove();
		pr_err("fake-nvidia: pci_create_root_bus failed for domain %x\n", sysdata.domain);
		return -ENODEV;
	}
	pci_scan_child_bus(root_bus);
	/*
	 * Adding a device attaches the (already registered) driver to it, so
	 * the order of pci_bus_add_device() calls is the probe order.
	 * pci_bus_add_devices() adds the rest in listing order.
	 */
	if (reverse_probe) {
		struct pci_dev *pdev;

		list_for_each_entry_reverse(pdev, &root_bus->devices, bus_list)
			pci_bus_add_device(pdev);
	}
	pci_bus_add_devices(root_bus);
	pci_unlock_rescan_remove();
	pr_info("fake-nvidia: %u GPU(s) on PCI domain %x\n", gpus, sysdata.domain);
	return 0;
}

static void remove_bus(void)
{
	pci_lock_rescan_remove();
	pci_stop_root_bus(root_bus);
	pci_remove_root_bus(root_bus);
	pci_unlock_rescan_remove();
}

static int register_majors(void)
{
	int ret;

	if (legacy_frontend)
		return register_chrdev(NV_MAJOR, "nvidia-frontend", &nv_fops);
	ret = __register_chrdev(NV_MAJOR, 0, NV_CTL_MINOR - 1, "nvidia", &nv_fops);
	if (ret < 0)
		return ret;
	ret = __register_chrdev(NV_MAJOR, NV_CTL_MINOR, 1, "nvidiactl", &nv_fops);
	if (ret < 0)
		__unregister_chrdev(NV_MAJOR, 0, NV_CTL_MINOR - 1, "nvidia");
	return ret < 0 ? ret : 0;
}

static void unregister_majors(void)
{
	if (legacy_frontend) {
		unregister_chrdev(NV_MAJOR, "nvidia-frontend");
		return;
	}
	__unregister_chrdev(NV_MAJOR, NV_CTL_MINOR, 1, "nvidiactl");
	__unregister_chrdev(NV_MAJOR, 0, NV_CTL_MINOR - 1, "nvidia");
}

static int __init nv_init(void)
{
	int i, ret;

	if (gpus < 1 || gpus > FAKE_MAX_GPUS) {
		pr_err("fake-nvidia: gpus=%u is out of range 1-%d\n", gpus, FAKE_MAX_GPUS);
		return -EINVAL;
	}
	if (mig > MIG_MAX_INSTANCES) {
		pr_err("fake-nvidia: mig=%u is out of range 0-%d\n", mig, MIG_MAX_INSTANCES);
		return -EINVAL;
	}
	for (i = 0; i < FAKE_MAX_GPUS; i++) {
		INIT_LIST_HEAD(&gpu_state[i].pending);
		INIT_WORK(&gpu_state[i].init_work, gpu_init_work);
		init_waitqueue_head(&gpu_state[i].state_wq);
		INIT_LIST_HEAD(&gpu_state[i].files);
	}
	/* Unbound, one worker per GPU: GPUs initialize in parallel. */
	init_wq = alloc_workqueue("fake-nvidia-init", WQ_UNBOUND, FAKE_MAX_GPUS);
	if (!init_wq)
		return -ENOMEM;
	ret = register_majors();
	if (ret)
		goto out_wq;
	caps_major = register_chrdev(0, "nvidia-caps", &caps_fops);
	if (caps_major < 0) {
		ret = caps_major;
		goto out_majors;
	}
	proc_nvidia = proc_mkdir("driver/nvidia", NULL);
	proc_gpus = proc_mkdir("gpus", proc_nvidia);
	proc_test = proc_mkdir("driver/nvidia-test", NULL);
	proc_create_single("params", 0444, proc_nvidia, params_show);
	proc_create_single("version", 0444, proc_nvidia, version_show);
	proc_create_single("counters", 0444, proc_test, counters_show);
	proc_create("lose", 0200, proc_test, &lose_ops);
	proc_create("mig", 0600, proc_test, &mig_ops);
	if (mig || mig_on) {
		struct proc_dir_entry *mig_dir;

		proc_caps = proc_mkdir("capabilities", proc_nvidia);
		mig_dir = proc_mkdir("mig", proc_caps);
		add_cap(mig_dir, "config", &mig_control_caps[0], 1, 0400);
		add_cap(mig_dir, "monitor", &mig_control_caps[1], 2, 0444);
		proc_nv_caps = proc_mkdir("driver/nvidia-caps", NULL);
		proc_create_single("mig-minors", 0444, proc_nv_caps, mig_minors_show);
	}
	ret = pci_register_driver(&nv_driver);
	if (ret)
		goto out_proc;
	ret = create_bus();
	if (ret)
		goto out_driver;
	return 0;

out_driver:
	pci_unregister_driver(&nv_driver);
out_proc:
	proc_remove(proc_nv_caps);
	proc_remove(proc_test);
	proc_remove(proc_nvidia);
	unregister_chrdev(caps_major, "nvidia-caps");
out_majors:
	unregister_majors();
out_wq:
	destroy_workqueue(init_wq);
	return ret;
}

static void __exit nv_exit(void)
{
	remove_bus();
	pci_unregister_driver(&nv_driver);
	proc_remove(proc_nv_caps);
	proc_remove(proc_test);
	proc_remove(proc_nvidia);
	unregister_chrdev(caps_major, "nvidia-caps");
	unregister_majors();
	/* An init's last instructions may still run after its file closed. */
	destroy_workqueue(init_wq);
}

module_init(nv_init);
module_exit(nv_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("gpuinit test stand-in for the NVIDIA driver: fake GPUs on a software PCI bus");
