// SPDX-License-Identifier: GPL-2.0
/*
 * Stand-in for the NVIDIA driver in gpuinit's VM tests. It presents the
 * kernel interface the tools use, without hardware:
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
 *    GPUs by UUID (bound, but open() fails with EPERM);
 *  - with mig=N, the MIG capability files of N GPU instances per GPU and
 *    /proc/driver/nvidia-caps/mig-minors, numbered as the real driver does;
 *  - the open/close lifecycle: the first open of /dev/nvidiaN initializes
 *    the GPU and the last close tears it down, counted per GPU in
 *    /proc/driver/nvidia-test/counters.
 */
#include <linux/fs.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/pci.h>
#include <linux/proc_fs.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/spinlock.h>

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
/* An A100 or H100 has at most 7 GPU instances at a time. */
#define MIG_MAX_INSTANCES 7

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

struct fake_gpu {
	struct pci_dev *pdev;
	int minor;
	bool excluded;
	unsigned int opens;
	unsigned long inits;
	unsigned long deinits;
	struct proc_dir_entry *proc_dir;
	struct proc_dir_entry *caps_dir;
};

/* The real driver's numbering of MIG capability minors (see mig-minors). */
#define MIG_GPUS 32
#define MIG_GIS 15
#define MIG_CIS 8
#define MIG_GI_MINOR(g, i) (3 + 135 * (g) + 9 * (i))
#define MIG_CI_MINOR(g, i, c) (4 + 135 * (g) + 9 * (i) + (c))
/* gi1..giN must stay inside gi0..gi14, or their minors are the next GPU's. */
static_assert(MIG_MAX_INSTANCES < MIG_GIS);

/* Config space of slot i function 0 (GPU) and slot 0 function 1 (audio). */
static u8 config[FAKE_MAX_GPUS + 1][FAKE_CFG_SIZE];
static DEFINE_SPINLOCK(config_lock);
static struct fake_gpu gpu_state[FAKE_MAX_GPUS];
static DEFINE_MUTEX(gpu_lock);
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

static int nv_open(struct inode *inode, struct file *file)
{
	int minor = iminor(inode);
	struct fake_gpu *gpu;

	if (minor == NV_CTL_MINOR)
		return 0;
	mutex_lock(&gpu_lock);
	gpu = gpu_by_minor(minor);
	if (!gpu) {
		mutex_unlock(&gpu_lock);
		return -ENODEV;
	}
	if (gpu->excluded) {
		pr_err("fake-nvidia: gpu %d (%s): open() not permitted for excluded GPU\n", minor,
		       pci_name(gpu->pdev));
		mutex_unlock(&gpu_lock);
		return -EPERM;
	}
	if (gpu->opens++ == 0) {
		gpu->inits++;
		pr_info("fake-nvidia: gpu %d (%s) init\n", minor, pci_name(gpu->pdev));
	}
	mutex_unlock(&gpu_lock);
	return 0;
}

static int nv_release(struct inode *inode, struct file *file)
{
	int minor = iminor(inode);
	struct fake_gpu *gpu;

	if (minor == NV_CTL_MINOR)
		return 0;
	mutex_lock(&gpu_lock);
	gpu = gpu_by_minor(minor);
	if (gpu && --gpu->opens == 0) {
		gpu->deinits++;
		pr_info("fake-nvidia: gpu %d (%s) deinit\n", minor, pci_name(gpu->pdev));
	}
	mutex_unlock(&gpu_lock);
	return 0;
}

static const struct file_operations nv_fops = {
	.owner = THIS_MODULE,
	.open = nv_open,
	.release = nv_release,
};

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
	seq_printf(m, "# minor bdf inits deinits opens\n");
	for (i = 0; i < FAKE_MAX_GPUS; i++)
		if (gpu_state[i].pdev)
			seq_printf(m, "%d %s %lu %lu %u\n", gpu_state[i].minor,
				   pci_name(gpu_state[i].pdev), gpu_state[i].inits,
				   gpu_state[i].deinits, gpu_state[i].opens);
	mutex_unlock(&gpu_lock);
	return 0;
}

/* A capability file: private data packs the minor and the mode. */
static int cap_show(struct seq_file *m, void *v)
{
	unsigned long packed = (unsigned long)m->private;

	seq_printf(m, "DeviceFileMinor: %lu\n", packed & 0xffff);
	seq_printf(m, "DeviceFileMode: %lu\n", packed >> 16);
	seq_printf(m, "DeviceFileModify: %u\n", NVreg_ModifyDeviceFiles);
	return 0;
}

static void add_cap(struct proc_dir_entry *dir, unsigned int minor, unsigned int mode)
{
	proc_create_single_data("access", 0444, dir, cap_show,
				(void *)(unsigned long)(minor | mode << 16));
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

/* capabilities/gpu<minor>/mig/gi<I>/access and gi<I>/ci0/access, I = 1..mig */
static void add_mig_instances(struct fake_gpu *gpu)
{
	struct proc_dir_entry *mig_dir, *gi_dir, *ci_dir;
	char name[16];
	unsigned int i;

	snprintf(name, sizeof(name), "gpu%d", gpu->minor);
	gpu->caps_dir = proc_mkdir(name, proc_caps);
	mig_dir = proc_mkdir("mig", gpu->caps_dir);
	for (i = 1; i <= mig; i++) {
		snprintf(name, sizeof(name), "gi%u", i);
		gi_dir = proc_mkdir(name, mig_dir);
		add_cap(gi_dir, MIG_GI_MINOR(gpu->minor, i), 0444);
		ci_dir = proc_mkdir("ci0", gi_dir);
		add_cap(ci_dir, MIG_CI_MINOR(gpu->minor, i, 0), 0444);
	}
}

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
	gpu->pdev = pdev;
	gpu->opens = 0;
	mutex_unlock(&gpu_lock);
	gpu->proc_dir = proc_mkdir(pci_name(pdev), proc_gpus);
	if (gpu->proc_dir)
		proc_create_single_data("information", 0444, gpu->proc_dir, information_show, gpu);
	if (mig && gpu->minor < MIG_GPUS)
		add_mig_instances(gpu);
	pci_set_drvdata(pdev, gpu);
	dev_info(&pdev->dev, "fake-nvidia: bound as minor %d%s\n", gpu->minor,
		 gpu->excluded ? " (excluded)" : "");
	return 0;
}

static void nv_remove(struct pci_dev *pdev)
{
	struct fake_gpu *gpu = pci_get_drvdata(pdev);

	proc_remove(gpu->proc_dir);
	proc_remove(gpu->caps_dir);
	gpu->caps_dir = NULL;
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
	int ret;

	if (gpus < 1 || gpus > FAKE_MAX_GPUS) {
		pr_err("fake-nvidia: gpus=%u is out of range 1-%d\n", gpus, FAKE_MAX_GPUS);
		return -EINVAL;
	}
	if (mig > MIG_MAX_INSTANCES) {
		pr_err("fake-nvidia: mig=%u is out of range 0-%d\n", mig, MIG_MAX_INSTANCES);
		return -EINVAL;
	}
	ret = register_majors();
	if (ret)
		return ret;
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
	if (mig) {
		struct proc_dir_entry *mig_dir;

		proc_caps = proc_mkdir("capabilities", proc_nvidia);
		mig_dir = proc_mkdir("mig", proc_caps);
		proc_create_single_data("config", 0444, mig_dir, cap_show,
					(void *)(unsigned long)(1 | 0400 << 16));
		proc_create_single_data("monitor", 0444, mig_dir, cap_show,
					(void *)(unsigned long)(2 | 0444 << 16));
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
}

module_init(nv_init);
module_exit(nv_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("gpuinit test stand-in for the NVIDIA driver: fake GPUs on a software PCI bus");
