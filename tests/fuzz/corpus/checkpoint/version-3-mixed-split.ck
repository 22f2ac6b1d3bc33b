dptrain-checkpoint 3
conv1.weight 20 1 3 3
conv1.bias 20
conv2.weight 50 20 5 5
conv2.bias 50
dense1.weight 128 800
dense1.bias 128
dense2.weight 10 128
dense2.bias 10
devices cuda 1 cpu 2
allreduce naive
split auto 200 28 28
batch 256
lr 0.3
warmup 0
seed 0
pool avg
init xavier
limit-train 1000
limit-test 0
epochs 5
checkpoint-every 1
next-epoch 2
next-step 3
loss-sum 123.25
