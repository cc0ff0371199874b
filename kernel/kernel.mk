# Kernel build rules, included by the top-level Makefile.
# make build  -> build/libflashcore.so (C ABI, kernel/flashcore.h), build/flashcore_driver, build/ptxas.log
# make ptx    -> build/flashcore.ptx        make sass -> build/flashcore.sass (needs cuobjdump)
NVCC ?= nvcc
BUILD_DIR ?= build
ARCH_FLAGS := -gencode=arch=compute_90a,code=sm_90a
# NVCC_EXTRA: extra flags, e.g. -DFLASHCORE_PLANT_SPILL for the planted-spill build of the build gate's selftest.
NVCC_EXTRA ?=
NVCC_FLAGS := -std=c++17 -O3 $(ARCH_FLAGS) -lineinfo -Xptxas=--warn-on-spills -Xcompiler=-fPIC,-Wall $(NVCC_EXTRA)
KERNEL_HEADERS := $(wildcard kernel/*.h kernel/*.cuh)
LIB_SOURCES := kernel/flashcore.cu kernel/api.cu kernel/tensor_maps.cu
# fc_kernel_id(): a content hash of every kernel source, so a tuned table (harness/tune) knows the kernel it was
# measured on (tests/test_tuning.py recomputes it from the same files).
KERNEL_SOURCES := $(sort $(wildcard kernel/*.h kernel/*.cuh kernel/*.cu))
KERNEL_ID := $(shell cat $(KERNEL_SOURCES) | sha256sum | cut -c1-16)

.PHONY: build ptx sass kernel-id

kernel-id:
	@echo $(KERNEL_ID)

build: $(BUILD_DIR)/libflashcore.so $(BUILD_DIR)/flashcore_driver

# -Xptxas -v writes the register/spill/smem report of every kernel; the build gate reads ptxas.log.
$(BUILD_DIR)/flashcore.o: kernel/flashcore.cu $(KERNEL_HEADERS)
	@mkdir -p $(BUILD_DIR)
	$(NVCC) $(NVCC_FLAGS) -Xptxas=-v -c $< -o $@ 2> $(BUILD_DIR)/ptxas.log || { cat $(BUILD_DIR)/ptxas.log; exit 1; }
	@grep -E "error|warning" $(BUILD_DIR)/ptxas.log || true

$(BUILD_DIR)/api.o: kernel/api.cu $(KERNEL_SOURCES)
	@mkdir -p $(BUILD_DIR)
	$(NVCC) $(NVCC_FLAGS) -DFLASHCORE_KERNEL_ID='"$(KERNEL_ID)"' -c $< -o $@

$(BUILD_DIR)/tensor_maps.o: kernel/tensor_maps.cu $(KERNEL_HEADERS)
	@mkdir -p $(BUILD_DIR)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@

$(BUILD_DIR)/naive.o: kernel/naive.cu $(KERNEL_HEADERS)
	@mkdir -p $(BUILD_DIR)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@

$(BUILD_DIR)/libflashcore.so: $(BUILD_DIR)/flashcore.o $(BUILD_DIR)/api.o $(BUILD_DIR)/tensor_maps.o
	$(NVCC) $(ARCH_FLAGS) -shared -o $@ $^ -cudart=static

$(BUILD_DIR)/flashcore_driver: kernel/driver.cu $(BUILD_DIR)/flashcore.o $(BUILD_DIR)/api.o $(BUILD_DIR)/tensor_maps.o $(BUILD_DIR)/naive.o $(KERNEL_HEADERS)
	$(NVCC) $(NVCC_FLAGS) -o $@ kernel/driver.cu $(BUILD_DIR)/flashcore.o $(BUILD_DIR)/api.o $(BUILD_DIR)/tensor_maps.o $(BUILD_DIR)/naive.o

ptx:
	@mkdir -p $(BUILD_DIR)
	$(NVCC) $(NVCC_FLAGS) -ptx kernel/flashcore.cu -o $(BUILD_DIR)/flashcore.ptx

sass: $(BUILD_DIR)/libflashcore.so
	cuobjdump --dump-sass $(BUILD_DIR)/libflashcore.so > $(BUILD_DIR)/flashcore.sass

# Test-only planted-bug program (tests/planted/planted.cu) for the sanitizer gate's selftest.
.PHONY: planted
planted: $(BUILD_DIR)/planted
$(BUILD_DIR)/planted: tests/planted/planted.cu
	@mkdir -p $(BUILD_DIR)
	$(NVCC) -std=c++17 $(ARCH_FLAGS) -lineinfo -o $@ $<
