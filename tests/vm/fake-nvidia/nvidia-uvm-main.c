// SPDX-License-Identifier: GPL-2.0
/*
 * Stand-in for nvidia-uvm.ko in gpuinit's VM tests: a dynamic "nvidia-uvm"
 * character major, and a symbol taken from nvidia.ko so that depmod records
 * the dependency as it does for the real driver.
 */
#include <linux/fs.h>
#include <linux/module.h>

int nvidia_fake_uvm_register(void);

static int uvm_major;

static int uvm_open(struct inode *inode, struct file *file)
{
	return iminor(inode) <= 1 ? 0 : -ENODEV;
}

static const struct file_operations uvm_fops = {
	.owner = THIS_MODULE,
	.open = uvm_open,
};

static int __init uvm_init(void)
{
	int ret = nvidia_fake_uvm_register();

	if (ret)
		return ret;
	uvm_major = register_chrdev(0, "nvidia-uvm", &uvm_fops);
	return uvm_major < 0 ? uvm_major : 0;
}

static void __exit uvm_exit(void)
{
	unregister_chrdev(uvm_major, "nvidia-uvm");
}

module_init(uvm_init);
module_exit(uvm_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("gpuinit test stand-in for nvidia-uvm");
