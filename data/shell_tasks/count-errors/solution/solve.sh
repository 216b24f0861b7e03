head -3 app.log
grep -c ' ERROR ' app.log > answer.txt
cat answer.txt
