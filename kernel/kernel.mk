# Kernel build rules, included by the top-level Makefile.
# make build  -> build/libflashcore.so (C ABI, kernel/flashcore.h), build/flashcore_driver, build/ptxas.log
# make ptx    -> build/flashcore.ptx (flashcore.cu, fp8_decode.cu, head_dims_apart.cu)  make sass -> build/flashcore.sass (needs cuobjdump)
NVCC ?= nvcc
BUILD_DIR ?= build
ARCH_FLAGS := -gencode=arch=compute_90a,code=sm_90a
# NVCC_EXTRA: extra flags, e.g. -DFLASHCORE_PLANT_SPILL for the planted-spill build of the build gate's selftest.
NVCC_EXTRA ?=
NVCC_FLAGS := -std=c++17 -O3 $(ARCH_FLAGS) -lineinfo -Xptxas=--warn-on-spills -Xcompiler=-fPIC,-Wall $(NVCC_EXTRA)
KERNEL_HEADERS := $(wildcard kernel/*.h kernel/*.cuh kernel/phase1/*.h kernel/phase1/*.cuh)
LIB_SOURCES := kernel/flashcore.cu kernel/fp8_decode.cu kernel/head_dims_apart.cu kernel/validate.cu kernel/validate_serving.cu kernel/tensor_maps.cu \
  kernel/append.cu
# fc_kernel_id(): a content hash of every kernel source, so a tuned table (harness/tune) knows the kernel it was
# measured on (tests/test_tuning.py recomputes it from the same files). The standalone driver (driver.cu) and its
# naive reference (naive.cu, naive.h) are not in the library: a change to them changes no kernel, so they are left out.
KERNEL_SOURCES := $(sort $(filter-out kernel/driver.cu kernel/naive.cu kernel/naive.h,$(wildcard kernel/*.h kernel/*.cuh kernel/*.cu) $(wildcard kernel/phase1/*)))
KERNEL_ID := $(shell cat $(KERNEL_SOURCES) | sha256sum | cut -c1-16)
# The points compiled besides each head dim's defaults (kernel/flashcore.cu): one object per
# FC_POINT(head_dim, block_n, stages, consumer_wgs, pingpong, rescale_early, producer_regs) line, built from
# kernel/point.cu, so they compile in parallel (make -j). make tune passes its candidates' file. The file is not part
# of KERNEL_ID: which points are compiled changes no kernel code.
POINTS_FILE ?= kernel/tuned_points.inc
POINT_NAMES := $(shell sed -n 's/^FC_POINT(\([0-9, ]*\)).*/\1/p' $(POINTS_FILE) | tr -d ' ' | tr ',' '_' | sort -u)
POINT_OBJS := $(POINT_NAMES:%=$(BUILD_DIR)/points/p%.o)
# Objects of kernels compiled apart from flashcore.cu (their rule below says why).
APART_OBJS := $(BUILD_DIR)/fp8_decode.o $(BUILD_DIR)/head_dims_apart.o
LIB_OBJS := $(BUILD_DIR)/flashcore.o $(APART_OBJS) $(POINT_OBJS) $(BUILD_DIR)/validate.o $(BUILD_DIR)/validate_serving.o \
  $(BUILD_DIR)/tensor_maps.o $(BUILD_DIR)/append.o
point_arg = $(word $(1),$(subst _, ,$*))

.PHONY: build ptx sass kernel-id

kernel-id:
	@echo $(KERNEL_ID)

build: $(BUILD_DIR)/libflashcore.so $(BUILD_DIR)/flashcore_driver

# -Xptxas -v writes the register/spill/smem report of every kernel, one log per object; the library's rule joins
# them into ptxas.log, which the build gate reads.
$(BUILD_DIR)/flashcore.o: kernel/flashcore.cu $(KERNEL_HEADERS) $(POINTS_FILE)
	@mkdir -p $(BUILD_DIR)
	$(NVCC) $(NVCC_FLAGS) -Xptxas=-v -DFLASHCORE_POINTS_FILE='"$(abspath $(POINTS_FILE))"' -c $< -o $@ \
	  2> $(@:.o=.ptxas.log) || { cat $(@:.o=.ptxas.log); exit 1; }
	@grep -E "error|warning" $(@:.o=.ptxas.log) || true

# Kernels compiled apart from flashcore.cu, which declares them extern: FP8's decode points of head dims 64 and 256
# (kernel/fp8_points.h says why) and the default points of the head dims FC_HEAD_DIMS_APART lists (kernel/head_dims.h).
$(APART_OBJS): $(BUILD_DIR)/%.o: kernel/%.cu $(KERNEL_HEADERS)
	@mkdir -p $(BUILD_DIR)
	$(NVCC) $(NVCC_FLAGS) -Xptxas=-v -c $< -o $@ 2> $(@:.o=.ptxas.log) || { cat $(@:.o=.ptxas.log); exit 1; }
	@grep -E "error|warning" $(@:.o=.ptxas.log) || true

$(BUILD_DIR)/points/p%.o: kernel/point.cu $(KERNEL_HEADERS)
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) -Xptxas=-v -DFC_POINT_HD=$(call point_arg,1) -DFC_POINT_BN=$(call point_arg,2) \
	  -DFC_POINT_STAGES=$(call point_arg,3) -DFC_POINT_WGS=$(call point_arg,4) -DFC_POINT_PINGPONG=$(call point_arg,5) \
	  -DFC_POINT_RESCALE=$(call point_arg,6) -DFC_POINT_PRODUCER=$(call point_arg,7) -c $< -o $@ \
	  2> $(@:.o=.ptxas.log) || { cat $(@:.o=.ptxas.log); exit 1; }
	@grep -E "error|warning" $(@:.o=.ptxas.log) || true

$(BUILD_DIR)/validate.o: kernel/validate.cu $(KERNEL_SOURCES)
	@mkdir -p $(BUILD_DIR)
	$(NVCC) $(NVCC_FLAGS) -DFLASHCORE_KERNEL_ID='"$(KERNEL_ID)"' -c $< -o $@

$(BUILD_DIR)/validate_serving.o: kernel/validate_serving.cu $(KERNEL_HEADERS)
	@mkdir -p $(BUILD_DIR)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@

$(BUILD_DIR)/tensor_maps.o: kernel/tensor_maps.cu $(KERNEL_HEADERS)
	@mkdir -p $(BUILD_DIR)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@

# The KV-cache append (fc_append_kv): its own small object, compiled in seconds apart from the attention kernel.
$(BUILD_DIR)/append.o: kernel/append.cu kernel/flashcore.h kernel/index_errors.h kernel/launch.h
	@mkdir -p $(BUILD_DIR)
	$(NVCC) $(NVCC_FLAGS) -Xptxas=-v -c $< -o $@ 2> $(@:.o=.ptxas.log) || { cat $(@:.o=.ptxas.log); exit 1; }
	@grep -E "error|warning" $(@:.o=.ptxas.log) || true

$(BUILD_DIR)/naive.o: kernel/naive.cu $(KERNEL_HEADERS)
	@mkdir -p $(BUILD_DIR)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@

# --no-undefined: a point the dispatch declares extern but no object defines fails here, not at dlopen.
$(BUILD_DIR)/libflashcore.so: $(LIB_OBJS)
	$(NVCC) $(ARCH_FLAGS) -shared -Xlinker=--no-undefined -o $@ $^ -cudart=static
	@cat $(BUILD_DIR)/flashcore.ptxas.log $(APART_OBJS:.o=.ptxas.log) $(POINT_OBJS:.o=.ptxas.log) \
	  $(BUILD_DIR)/append.ptxas.log > $(BUILD_DIR)/ptxas.log

$(BUILD_DIR)/flashcore_driver: kernel/driver.cu $(wildcard kernel/driver/*.cuh) $(LIB_OBJS) $(BUILD_DIR)/naive.o $(KERNEL_HEADERS)
	$(NVCC) $(NVCC_FLAGS) -o $@ kernel/driver.cu $(LIB_OBJS) $(BUILD_DIR)/naive.o

# The attention kernels' PTX: flashcore.cu's, the FP8 decode points' (kernel/fp8_decode.cu) and the head dims compiled
# apart (kernel/head_dims_apart.cu), one file; each source its own target, so make -j compiles them side by side.
PTX_PARTS := $(BUILD_DIR)/flashcore.cu.ptx $(BUILD_DIR)/fp8_decode.cu.ptx $(BUILD_DIR)/head_dims_apart.cu.ptx
ptx: $(PTX_PARTS)
	cat $(PTX_PARTS) > $(BUILD_DIR)/flashcore.ptx

$(BUILD_DIR)/%.cu.ptx: kernel/%.cu $(KERNEL_HEADERS)
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) -ptx $< -o $@

sass: $(BUILD_DIR)/libflashcore.so
	cuobjdump --dump-sass $(BUILD_DIR)/libflashcore.so > $(BUILD_DIR)/flashcore.sass

# Test-only planted bugs: the planted-bug program (tests/planted/planted.cu) for the sanitizer gate's selftest, and
# the planted hang (tests/planted/planted_hang.cu, a kernel that never finishes) for the watchdog's.
.PHONY: planted
planted: $(BUILD_DIR)/planted $(BUILD_DIR)/libplanted_hang.so
$(BUILD_DIR)/planted: tests/planted/planted.cu
	@mkdir -p $(BUILD_DIR)
	$(NVCC) -std=c++17 $(ARCH_FLAGS) -lineinfo -o $@ $<
$(BUILD_DIR)/libplanted_hang.so: tests/planted/planted_hang.cu
	@mkdir -p $(BUILD_DIR)
	$(NVCC) -std=c++17 $(ARCH_FLAGS) -lineinfo -Xcompiler=-fPIC,-Wall -shared -o $@ $< -cudart=static
