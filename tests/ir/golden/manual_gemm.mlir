// RUN: print examples/manual_gemm.py | filecheck %s
// RUN: parse %s | print | filecheck %s
// One concern: explicit memories, their MemoryState tokens carried through the
// pipeline, and the pipeline stages, in the generic form.  The IR below the CHECK
// lines is the parser's input; both printings must match the CHECK lines.

// CHECK-LABEL: "tile.kernel"() <{sym_name = "manual_gemm"}> ({
// CHECK-NEXT: ^bb0(%[[A:[^:]+]]: view<[M, K], f32, const>, %[[B:[^:]+]]: view<[K, N], f32, const>, %[[C:[^:]+]]: view<[M, N], f32>):
// CHECK-NEXT: "region.parallel"() <{label = "block_m_block_n", axes = [#axis<block_m = ceildiv(M, 32)>, #axis<block_n = ceildiv(N, 32)>], scope = "AUTOMATIC"}> ({
// CHECK-NEXT: %[[AS:[^,]+]], %[[AS0:[^ ]+]] = "memory.alloc"() <{dtype = f32, layout = #layout<[32, 16] stride [17, 1]>, resource = #resource<auto>, owner = "block_m_block_n"}> : () -> (memory<[32, 16], f32>, state<[32, 16], f32>)
// CHECK-NEXT: %[[BS:[^,]+]], %[[BS0:[^ ]+]] = "memory.alloc"() <{dtype = f32, layout = #layout<[16, 32] stride [1, 16]>, resource = #resource<auto>, owner = "block_m_block_n"}> : () -> (memory<[16, 32], f32>, state<[16, 32], f32>)
// CHECK-NEXT: %[[ACC:[^ ]+]] = "tile.full"() <{shape = [32, 32], dtype = f32, value = 0.0}> : () -> (tile<[32, 32], f32>)
// CHECK-NEXT: %[[ACC_OUT:[^,]+]], %{{[^,]+}}, %{{[^ ]+}} = "region.loop"(%[[ACC]], %[[AS0]], %[[BS0]]) <{kind = #loop<pipeline>, label = "k_tiles", axes = [#axis<k_tiles = ceildiv(K, 16)>], window = 2, interval = 1, stages = ["load", "compute"]}> ({
// CHECK-NEXT: ^bb0(%[[ACC_IN:[^:]+]]: tile<[32, 32], f32>, %[[AS_IN:[^:]+]]: state<[32, 16], f32>, %[[BS_IN:[^:]+]]: state<[16, 32], f32>):
// CHECK-NEXT: %[[TA:[^ ]+]] = "tile.load"(%[[A]]) <{offsets = [32 * %block_m, 16 * %k_tiles], shape = [32, 16], fill = 0.0}> {stage = "load"} : (view<[M, K], f32, const>) -> (tile<[32, 16], f32>)
// CHECK-NEXT: %[[AS1:[^ ]+]] = "memory.store"(%[[AS]], %[[AS_IN]], %[[TA]]) {stage = "load"} : (memory<[32, 16], f32>, state<[32, 16], f32>, tile<[32, 16], f32>) -> (state<[32, 16], f32>)
// CHECK-NEXT: %[[TB:[^ ]+]] = "tile.load"(%[[B]]) <{offsets = [16 * %k_tiles, 32 * %block_n], shape = [16, 32], fill = 0.0}> {stage = "load"}
// CHECK-NEXT: %[[BS1:[^ ]+]] = "memory.store"(%[[BS]], %[[BS_IN]], %[[TB]]) {stage = "load"}
// CHECK-NEXT: %[[SA:[^ ]+]] = "memory.load"(%[[AS]], %[[AS1]]) {stage = "compute"} : (memory<[32, 16], f32>, state<[32, 16], f32>) -> (tile<[32, 16], f32>)
// CHECK-NEXT: %[[SB:[^ ]+]] = "memory.load"(%[[BS]], %[[BS1]]) {stage = "compute"}
// CHECK-NEXT: %[[SUM:[^ ]+]] = "tile.mma"(%[[SA]], %[[SB]], %[[ACC_IN]]) {stage = "compute"} : (tile<[32, 16], f32>, tile<[16, 32], f32>, tile<[32, 32], f32>) -> (tile<[32, 32], f32>)
// CHECK-NEXT: "region.yield"(%[[SUM]], %[[AS1]], %[[BS1]]) : (tile<[32, 32], f32>, state<[32, 16], f32>, state<[16, 32], f32>) -> ()
// CHECK-NEXT: }) : (tile<[32, 32], f32>, state<[32, 16], f32>, state<[16, 32], f32>) -> (tile<[32, 32], f32>, state<[32, 16], f32>, state<[16, 32], f32>)
// CHECK-NEXT: "tile.store"(%[[C]], %[[ACC_OUT]]) <{offsets = [32 * %block_m, 32 * %block_n]}> : (view<[M, N], f32>, tile<[32, 32], f32>) -> ()
// CHECK-NEXT: }) : () -> ()
// CHECK-NEXT: }) : () -> ()

"tile.kernel"() <{sym_name = "manual_gemm"}> ({
^bb0(%A: view<[M, K], f32, const>, %B: view<[K, N], f32, const>, %C: view<[M, N], f32>):
  "region.parallel"() <{label = "block_m_block_n", axes = [#axis<block_m = ceildiv(M, 32)>, #axis<block_n = ceildiv(N, 32)>], scope = "AUTOMATIC"}> ({
    %As, %As_0 = "memory.alloc"() <{dtype = f32, layout = #layout<[32, 16] stride [17, 1]>, resource = #resource<auto>, owner = "block_m_block_n"}> : () -> (memory<[32, 16], f32>, state<[32, 16], f32>)
    %Bs, %Bs_0 = "memory.alloc"() <{dtype = f32, layout = #layout<[16, 32] stride [1, 16]>, resource = #resource<auto>, owner = "block_m_block_n"}> : () -> (memory<[16, 32], f32>, state<[16, 32], f32>)
    %acc = "tile.full"() <{shape = [32, 32], dtype = f32, value = 0.0}> : () -> (tile<[32, 32], f32>)
    %acc_0, %As_1, %Bs_1 = "region.loop"(%acc, %As_0, %Bs_0) <{kind = #loop<pipeline>, label = "k_tiles", axes = [#axis<k_tiles = ceildiv(K, 16)>], window = 2, interval = 1, stages = ["load", "compute"]}> ({
    ^bb0(%acc_1: tile<[32, 32], f32>, %As_2: state<[32, 16], f32>, %Bs_2: state<[16, 32], f32>):
      %0 = "tile.load"(%A) <{offsets = [32 * %block_m, 16 * %k_tiles], shape = [32, 16], fill = 0.0}> {stage = "load"} : (view<[M, K], f32, const>) -> (tile<[32, 16], f32>)
      %As_3 = "memory.store"(%As, %As_2, %0) {stage = "load"} : (memory<[32, 16], f32>, state<[32, 16], f32>, tile<[32, 16], f32>) -> (state<[32, 16], f32>)
      %1 = "tile.load"(%B) <{offsets = [16 * %k_tiles, 32 * %block_n], shape = [16, 32], fill = 0.0}> {stage = "load"} : (view<[K, N], f32, const>) -> (tile<[16, 32], f32>)
      %Bs_3 = "memory.store"(%Bs, %Bs_2, %1) {stage = "load"} : (memory<[16, 32], f32>, state<[16, 32], f32>, tile<[16, 32], f32>) -> (state<[16, 32], f32>)
      %2 = "memory.load"(%As, %As_3) {stage = "compute"} : (memory<[32, 16], f32>, state<[32, 16], f32>) -> (tile<[32, 16], f32>)
      %3 = "memory.load"(%Bs, %Bs_3) {stage = "compute"} : (memory<[16, 32], f32>, state<[16, 32], f32>) -> (tile<[16, 32], f32>)
      %4 = "tile.mma"(%2, %3, %acc_1) {stage = "compute"} : (tile<[32, 16], f32>, tile<[16, 32], f32>, tile<[32, 32], f32>) -> (tile<[32, 32], f32>)
      "region.yield"(%4, %As_3, %Bs_3) : (tile<[32, 32], f32>, state<[32, 16], f32>, state<[16, 32], f32>) -> ()
    }) : (tile<[32, 32], f32>, state<[32, 16], f32>, state<[16, 32], f32>) -> (tile<[32, 32], f32>, state<[32, 16], f32>, state<[16, 32], f32>)
    "tile.store"(%C, %acc_0) <{offsets = [32 * %block_m, 32 * %block_n]}> : (view<[M, N], f32>, tile<[32, 32], f32>) -> ()
  }) : () -> ()
}) : () -> ()
