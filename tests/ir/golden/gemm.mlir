// RUN: print examples/gemm.py | filecheck %s
// RUN: parse %s | print | filecheck %s
// One concern: a tile accumulator carried through a pipeline as a block argument,
// yielded, and used after the loop through the loop's result.

// CHECK-LABEL: "tile.kernel"() <{sym_name = "gemm"}> ({
// CHECK: %[[ACC:[^ ]+]] = "tile.full"() <{shape = [32, 32], dtype = f32, value = 0.0}>
// CHECK-NEXT: %[[OUT:[^ ]+]] = "region.loop"(%[[ACC]]) <{kind = #loop<pipeline>, label = "k_tiles", axes = [#axis<k_tiles = ceildiv(K, 16)>], window = 2, interval = 1, stages = []}> ({
// CHECK-NEXT: ^bb0(%[[IN:[^:]+]]: tile<[32, 32], f32>):
// CHECK: %[[NEXT:[^ ]+]] = "tile.mma"(%{{[^,]+}}, %{{[^,]+}}, %[[IN]])
// CHECK-NEXT: "region.yield"(%[[NEXT]]) : (tile<[32, 32], f32>) -> ()
// CHECK-NEXT: }) : (tile<[32, 32], f32>) -> (tile<[32, 32], f32>)
// CHECK-NEXT: "tile.store"(%{{[^,]+}}, %[[OUT]])
// CHECK-NOT: "region.yield"

"tile.kernel"() <{sym_name = "gemm"}> ({
^bb0(%A: view<[M, K], f32, const>, %B: view<[K, N], f32, const>, %C: view<[M, N], f32>):
  "region.parallel"() <{label = "block_m_block_n", axes = [#axis<block_m = ceildiv(M, 32)>, #axis<block_n = ceildiv(N, 32)>], scope = "AUTOMATIC"}> ({
    %acc = "tile.full"() <{shape = [32, 32], dtype = f32, value = 0.0}> : () -> (tile<[32, 32], f32>)
    %acc_0 = "region.loop"(%acc) <{kind = #loop<pipeline>, label = "k_tiles", axes = [#axis<k_tiles = ceildiv(K, 16)>], window = 2, interval = 1, stages = []}> ({
    ^bb0(%acc_1: tile<[32, 32], f32>):
      %0 = "tile.load"(%A) <{offsets = [32 * %block_m, 16 * %k_tiles], shape = [32, 16], fill = 0.0}> : (view<[M, K], f32, const>) -> (tile<[32, 16], f32>)
      %1 = "tile.load"(%B) <{offsets = [16 * %k_tiles, 32 * %block_n], shape = [16, 32], fill = 0.0}> : (view<[K, N], f32, const>) -> (tile<[16, 32], f32>)
      %2 = "tile.mma"(%0, %1, %acc_1) : (tile<[32, 16], f32>, tile<[16, 32], f32>, tile<[32, 32], f32>) -> (tile<[32, 32], f32>)
      "region.yield"(%2) : (tile<[32, 32], f32>) -> ()
    }) : (tile<[32, 32], f32>) -> (tile<[32, 32], f32>)
    "tile.store"(%C, %acc_0) <{offsets = [32 * %block_m, 32 * %block_n]}> : (view<[M, N], f32>, tile<[32, 32], f32>) -> ()
  }) : () -> ()
}) : () -> ()
